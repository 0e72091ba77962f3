// The codes that the native library's handlers and their Python callers share, defined once here:
// each is a name and a value, declared below as jaxmg::codes::NAME and exported by the native module
// as jaxmg._native.codes() ({name: value}), which the Python side reads (jaxmg/kernels/ffi/_codes.py;
// a test checks its copy for processes without the native module against this list).
#pragma once

#include <cstdint>

// X(name, value): one code.
#define JAXMG_SHARED_CODES(X)                                                                            \
  X(cholesky_natural, 0)              /* jaxmg_potrf/potrs `mode`: the blocks are block-cyclic */        \
  X(cholesky_in_place, 1)             /* `mode`: the blocks of a Hermitian matrix's block layout */      \
  X(uplo_lower, 0)                    /* jaxmg_potrf/potrs `uplo`: cuSOLVERMp factors A = L L^H */       \
  X(uplo_upper, 1)                    /* `uplo`: A = U^H U */                                            \
  X(op_n, 0)                          /* jaxmg_gemm `op_x`/`op_y`, jaxmg_trmm `op`: the matrix itself */ \
  X(op_t, 1)                          /* its transpose */                                                \
  X(op_c, 2)                          /* its conjugate transpose */                                      \
  X(relayout_transpose, 0)            /* jaxmg_relayout `mode`: out = x^T */                             \
  X(relayout_symmetric_from_lower, 1) /* out = tril(x) + triu(x^T, 1) */                                 \
  X(relayout_lower_of_transpose, 2)   /* out = tril(x^T) */                                              \
  X(process_stride, 1024)             /* a device's identity: process_index * process_stride + ordinal */

namespace jaxmg::codes {
#define JAXMG_DECLARE_CODE(name, value) inline constexpr int64_t name = value;
JAXMG_SHARED_CODES(JAXMG_DECLARE_CODE)
#undef JAXMG_DECLARE_CODE
}  // namespace jaxmg::codes
