"""The codes that the native library's handlers and their Python callers share: Cholesky's
``mode`` and ``uplo``, the products' ``op``, relayout's ``mode`` and the device identity's
process stride. They are defined once, in csrc/codes.h, and read here from the native module
(``jaxmg._native.codes()``) where it is built and imports; a process without it (no GPU, or the
emulated native path on CPUs) uses :data:`BUILT_IN`, which a test checks against csrc/codes.h.
"""

from __future__ import annotations

from . import _library

#: csrc/codes.h's codes, for a process without the native module.
BUILT_IN: dict[str, int] = {
    "cholesky_natural": 0,
    "cholesky_in_place": 1,
    "uplo_lower": 0,
    "uplo_upper": 1,
    "op_n": 0,
    "op_t": 1,
    "op_c": 2,
    "relayout_transpose": 0,
    "relayout_symmetric_from_lower": 1,
    "relayout_lower_of_transpose": 2,
    "process_stride": 1024,
}


def read() -> dict[str, int]:
    """The codes, from the native module where it imports (and exports them), else :data:`BUILT_IN`."""
    try:
        native = _library._native_module()
    except (ImportError, OSError):
        return dict(BUILT_IN)
    exported = getattr(native, "codes", None)  # a module built before codes() existed has none
    return {**BUILT_IN, **dict(exported())} if exported is not None else dict(BUILT_IN)


#: The codes in force in this process.
CODES: dict[str, int] = read()
