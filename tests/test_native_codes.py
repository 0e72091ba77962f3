"""The codes shared by the native library's handlers and the Python side are defined once, in
csrc/codes.h: the Python side reads them from the native module where it loads, and its copy
for processes without it is csrc/codes.h's list."""

import pathlib
import re

from jaxmg.kernels.ffi import _codes, gemm, relayout
from jaxmg.kernels.native import cholesky

ROOT = pathlib.Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"


def header_codes() -> dict:
    """csrc/codes.h's X(name, value) entries."""
    text = (CSRC / "codes.h").read_text()
    return {name: int(value) for name, value in re.findall(r"\bX\((\w+),\s*(-?\d+)\)", text)}


def test_python_copy_is_the_header():
    codes = header_codes()
    assert len(codes) >= 11
    assert _codes.BUILT_IN == codes


def test_kernels_use_the_codes_in_force():
    codes = _codes.CODES
    assert (cholesky._UPLO_LOWER, cholesky._UPLO_UPPER) == (codes["uplo_lower"], codes["uplo_upper"])
    assert (cholesky._MODE_NATURAL, cholesky._MODE_INPLACE) == (codes["cholesky_natural"], codes["cholesky_in_place"])
    assert (relayout.TRANSPOSE, relayout.SYMMETRIC_FROM_LOWER, relayout.LOWER_OF_TRANSPOSE) == (
        codes["relayout_transpose"],
        codes["relayout_symmetric_from_lower"],
        codes["relayout_lower_of_transpose"],
    )
    import jax.numpy as jnp

    real, cplx = jnp.zeros((2, 2)), jnp.zeros((2, 2), jnp.complex64)
    assert [gemm._op(real, False), gemm._op(real, True), gemm._op(cplx, True)] == [
        codes["op_n"],
        codes["op_t"],
        codes["op_c"],
    ]


def test_no_code_is_restated_in_the_handlers():
    """The handlers compare their attributes with codes::NAME, not with the numbers."""
    cholesky_cc = (CSRC / "cholesky.cc").read_text()
    assert "pb.mode == 1" not in cholesky_cc and "pb.uplo ?" not in cholesky_cc
    assert "codes::cholesky_in_place" in cholesky_cc and "codes::uplo_upper" in cholesky_cc
    gemm_cc = (CSRC / "gemm.cc").read_text()
    assert not re.search(r"case [0-2]: return CUBLAS_OP", gemm_cc)
    grid_cc = (CSRC / "grid.cc").read_text()
    assert "1024" not in grid_cc and "codes::process_stride" in grid_cc
    relayout_cc = (CSRC / "relayout.cc").read_text()
    assert not re.search(r"mode [=!<>]=? ?[0-2]\b", relayout_cc)
    module_cc = (CSRC / "module.cc").read_text()
    assert "JAXMG_SHARED_CODES(" in module_cc and re.search(r'm\.def\(\s*"codes"', module_cc)


def test_native_module_codes_are_read_where_it_loads(monkeypatch):
    class Native:
        @staticmethod
        def codes():
            return {**_codes.BUILT_IN, "process_stride": 4096}

    monkeypatch.setattr(_codes._library, "_native_module", lambda: Native)
    assert _codes.read()["process_stride"] == 4096

    def missing():
        raise ImportError("no native module")

    monkeypatch.setattr(_codes._library, "_native_module", missing)
    assert _codes.read() == _codes.BUILT_IN
