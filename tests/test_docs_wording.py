"""The documentation says what the product does and what was measured (with date, machine and
command), never what the product used to do, what changed, or what has not run yet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import pattern_test

ROOT = Path(__file__).resolve().parent.parent

#: Phrases that tell the product's history or its to-do list rather than the product.
HISTORY = re.compile(
    r"\bused to (?:take|be|run|give|cost|fail|return|need)\b"
    r"|\bha(?:s|ve) not (?:yet )?(?:run|been (?:run|made|measured|re-?measured|tested))\b"
    r"|\bnot (?:\w+ ){0,3}yet\b|\byet to\b|\bnone of these has\b"
    r"|\bbefore this\b|\bbefore the (?:fix|change|products|rewrite)\b|\bafter the (?:fix|change|review)\b"
    r"|\bwith (?:the|this) code(?: of| as)?\b|\bon the (?:final|old|new|current) code\b|\bthe code as it is now\b"
    r"|\bno longer\b|\bpreviously\b|\bformerly\b|\boriginally\b|\banymore\b"
    r"|\bnow (?:takes|runs?|run at|gives|costs|uses|is)\b|\bsince \d{4}-\d{2}-\d{2}\b"
    r"|\bre-?measured\b|\bleft to try\b|\bwas evaluated\b|\bcame from\b|\bwere fixed\b",
    re.I,
)


def _pages():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))


def _history(text: str):
    """The history phrases of ``text`` and the text with its lines joined (sentences wrap)."""
    flat = " ".join(text.split())
    return [match.group(0) for match in HISTORY.finditer(flat)], flat


test_the_pattern = pattern_test(
    HISTORY,
    found=[
        "the launcher had exited 1.4 s after the failure (it used to take 302 s)",
        "needs two GPUs and has not run yet.",
        "Before this, an eager grad took about 4 s on every call.",
        "184.0 ms (45.7 ms with the code of 2026-12-02)",
        "QDWH's products now run at full precision",
        "Not yet run on 2 GPUs.",
        "The crossovers are not measured yet",
        "Since 2026-12-03 the Cholesky inverse on one GPU is the one-call handler",
        "in one run on the code as it is now.",
        "On the final code these ran 48/48 cases",
        "The two-GPU gap has not been re-measured with this code.",
        "the failures came from TF32 products",
    ],
    not_found=[
        "jaxmg takes 45.7 ms per call (2026-12-02, one H200)",
        "A module keeps a reference to `a` (not a copy) for derivatives",
        "Measured on one GPU (N = 131,072 needs two).",
        "the factor in natural order instead (redistributed first)",
        "(unset: no limit, since a large syevd can take minutes)",
        "`native.info()` shows the limit and the aborts so far",
    ],
)


@pytest.mark.parametrize("page", list(_pages()), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_speak_of_the_product_not_its_history(page):
    found, flat = _history(page.read_text())
    context = [flat[max(0, m.start() - 60) : m.end() + 40] for m in HISTORY.finditer(flat)]
    assert not found, (
        f"{page.relative_to(ROOT)} tells what the product used to do or has not done yet; say "
        "what it does and what was measured (date, machine, command):\n" + "\n".join(f"  ...{c}..." for c in context)
    )
