"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one page run top to bottom in one namespace, in this process: 8 simulated CPU
devices and float64 (conftest.py), one test per page. A block that is not meant to run here (it
needs GPUs, several processes, a cluster) says so in the page, on the line right before its
fence:

    <!-- not run: needs several processes -->
    ```python
    ...

Such blocks are reported (a ``NotRunSnippet`` warning per block, shown in pytest's warnings
summary, with the page, the line and the reason), and a page whose every block is marked is
skipped with the reasons.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")


class NotRunSnippet(UserWarning):
    """A documented Python block that the page marks as not run here, with its reason."""


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason, when the page marks the block

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's ```python blocks, in order, each dedented (blocks may sit in list items)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence or not fence.group("lang"):
            i += 1
            continue
        start, indent = i, fence.group("indent")
        end = start + 1
        while end < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[end]):
            end += 1
        if fence.group("lang") == "python":
            marker = NOT_RUN.match(lines[start - 1]) if start > 0 else None
            code = textwrap.dedent("\n".join(lines[start + 1 : end]))
            found.append(Block(page, start + 1, code, marker.group("reason") if marker else None))
        i = end + 1
    return found


def pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def _with_python(page: Path) -> bool:
    return bool(blocks(page))


@pytest.mark.parametrize("page", [p for p in pages() if _with_python(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_page_snippets_run_as_written(page):
    page_blocks = blocks(page)
    skipped = [b for b in page_blocks if b.not_run is not None]
    for block in skipped:
        assert block.not_run, f"{block.where()}: a not-run marker needs its reason"
        warnings.warn(NotRunSnippet(f"{block.where()}: not run: {block.not_run}"), stacklevel=1)
    if len(skipped) == len(page_blocks):
        pytest.skip("every block is marked not run: " + "; ".join(f"{b.where()}: {b.not_run}" for b in skipped))
    namespace: dict = {"__name__": f"doc_snippet_{page.stem}"}
    for block in page_blocks:
        if block.not_run is not None:
            continue
        try:
            code = compile(block.code, f"<{block.where()}>", "exec")
            exec(code, namespace)  # noqa: S102 - the documentation's own code
        except Exception as error:  # report which block of which page, then the error
            raise AssertionError(
                f"{block.where()}: the block fails as written: {type(error).__name__}: {error}"
            ) from error


def test_the_block_reader(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent("""\
        Text.

        ```python
        x = 1
        ```

        <!-- not run: needs several processes -->
        ```python
        import jax; jax.distributed.initialize()
        ```

        - a list item:

          ```python
          y = x + 1
          ```

        ```bash
        echo no
        ```
        """)
    )
    assert [(b.line, b.code, b.not_run) for b in blocks(page)] == [
        (3, "x = 1", None),
        (8, "import jax; jax.distributed.initialize()", "needs several processes"),
        (14, "y = x + 1", None),
    ]
