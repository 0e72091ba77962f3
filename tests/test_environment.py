"""Every environment variable that jaxmg reads (the package, the native library's sources, the
build) is documented in the one table of docs/environment.md, and every jaxmg variable that
table names is read somewhere."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: Reads of a variable named by a literal: os.environ.get("X"), os.environ["X"], env.get("X"),
#: getenv("X") (Python and C++), CMake's ENV{X}; and any string literal that is a jaxmg variable
#: (constants such as ENV_COORDINATOR = "JAXMG_COORDINATOR" that are read through their name).
READS = (
    re.compile(r"""\b(?:environ|env)(?:\.get\(|\[)\s*["']([A-Z][A-Z0-9_]+)["']"""),
    re.compile(r"""\bgetenv\(\s*["']([A-Z][A-Z0-9_]+)["']"""),
    re.compile(r"""\bENV\{([A-Z][A-Z0-9_]+)\}"""),
    re.compile(r"""["'](JAXMG_[A-Z0-9_]+)["']"""),
)
SOURCES = (
    "jaxmg/**/*.py",
    "build_support/*.py",
    "csrc/*.cc",
    "csrc/*.h",
    "csrc/*.cu",
    "cmake/*.cmake",
    "CMakeLists.txt",
)


def read_variables(texts) -> set:
    """The environment variables that ``texts`` read by name."""
    return {m.group(1) for text in texts for pattern in READS for m in pattern.finditer(text)}


def documented_variables() -> set:
    """The variables in the first column of docs/environment.md's table."""
    rows = [line for line in (ROOT / "docs" / "environment.md").read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def _source_texts():
    return [p.read_text(errors="replace") for pattern in SOURCES for p in sorted(ROOT.glob(pattern))]


def test_every_variable_read_is_documented():
    read = read_variables(_source_texts())
    assert {"JAXMG_NATIVE_DEBUG", "JAXMG_NCCL_LIBRARY", "JAXMG_TYPECHECK", "JAXMG_CUDA"} <= read  # the scan finds them
    missing = sorted(read - documented_variables())
    assert not missing, f"read by jaxmg but not in docs/environment.md's table: {missing}"


def test_every_jaxmg_variable_documented_is_read():
    stale = sorted(v for v in documented_variables() - read_variables(_source_texts()) if v.startswith("JAXMG_"))
    assert not stale, f"in docs/environment.md's table but read nowhere: {stale}"


def test_the_scan_finds_each_kind_of_read():
    text = (
        'os.environ.get("A_X"); os.environ["B_X"]; env.get("C_X"); std::getenv("D_X"); $ENV{E_X}; '
        'NAME = "JAXMG_F"; "set JAXMG_G=1 to"'
    )
    assert read_variables([text]) == {"A_X", "B_X", "C_X", "D_X", "E_X", "JAXMG_F"}
