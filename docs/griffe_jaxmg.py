"""A Griffe extension for jaxmg's API pages (mkdocs.yml loads it for mkdocstrings).

- Each argument in a docstring's ``Args:`` section gets its type from the live signature,
  written as jaxtyping shapes and dtypes (``Inexact[Array, 'n n']``, from
  ``jaxmg._typing.DOC_TYPES``) instead of the ``Union``/``Optional`` its alias expands to;
  an argument without an annotation takes its default's type (``bool``, ``str``).
- Sphinx roles left in docstrings (``:class:`Cholesky```) are shown as code (```Cholesky```),
  and reStructuredText literal blocks (a line ending in ``::`` and the indented lines after it)
  as fenced code blocks.
"""

from __future__ import annotations

import inspect
import re

import griffe

_ROLE = re.compile(r":(?:class|func|mod|data|attr|meth|obj|exc):`~?([^`]+)`")
_ARG = re.compile(r"^(\s+)(\*{0,2}\w+): ")


def _fenced(doc: str) -> str:
    """reStructuredText literal blocks (``text::`` then an indented block) as fenced code."""
    lines, out, i = doc.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::"):
            out.append(line)
            i += 1
            continue
        base = line[: len(line) - len(line.lstrip())]
        head = line.rstrip()[:-1]
        if head.strip() not in ("", ":"):
            out.append(head)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j == len(lines) or len(lines[j]) - len(lines[j].lstrip()) <= len(base):
            i += 1
            continue
        indent = len(lines[j]) - len(lines[j].lstrip())
        block = []
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) >= indent):
            block.append(lines[j][indent:])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        language = "pycon" if block[0].lstrip().startswith(">>>") else "python"
        out += ["", f"{base}```{language}", *(f"{base}{b}" if b else "" for b in block), f"{base}```", ""]
        i = j
    return "\n".join(out)


def _doc_type(annotation, default) -> str | None:
    from jaxmg._typing import DOC_TYPES

    if annotation is not inspect.Parameter.empty:
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
        if text is None:
            return None
        text = re.sub(r"^Optional\[(.*)\]$", r"\1 | None", text)
        return re.sub(r"\b\w+\b", lambda m: DOC_TYPES.get(m.group(0), m.group(0)), text)
    if default is not inspect.Parameter.empty and default is not None:
        return type(default).__name__
    return None


def _typed_args(doc: str, runtime) -> str:
    try:
        parameters = inspect.signature(runtime).parameters
    except (TypeError, ValueError):
        return doc
    lines, out, args_indent, header_indent = doc.splitlines(), [], None, None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped == "Args:":
            header_indent, args_indent = indent, None
        elif header_indent is not None and stripped and indent <= header_indent:
            header_indent = None
        elif header_indent is not None and stripped:
            args_indent = indent if args_indent is None else args_indent
            match = _ARG.match(line)
            if indent == args_indent and match and match.group(2) in parameters:
                p = parameters[match.group(2)]
                kind = _doc_type(p.annotation, p.default)
                if kind:
                    line = f"{match.group(1)}{match.group(2)} ({kind}): {line[match.end():]}"
        out.append(line)
    return "\n".join(out)


class JaxmgDocstrings(griffe.Extension):
    """Typed arguments and Markdown instead of Sphinx roles, on every documented object."""

    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if obj.docstring is None:
            return
        value = _fenced(_ROLE.sub(r"`\1`", obj.docstring.value))
        runtime = getattr(node, "obj", None)
        if runtime is not None and (inspect.isfunction(runtime) or inspect.isclass(runtime)):
            value = _typed_args(value, runtime)
        obj.docstring.value = value
