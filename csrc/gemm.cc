// jaxmg_gemm and jaxmg_trmm: matrix products on the calling GPU through cuBLAS, C = op(X) op(Y),
// and C = op(T) X or X op(T) for triangular T (cuBLAS's out-of-place trmm: one call, no wasted
// flops on the zero triangle).
//
// The triangular inverses of jaxmg/kernels/triangular.py are made of many products of distinct
// shapes. Compiled as XLA dots, each shape is autotuned on its first call (tens of seconds for
// a factor of order 32,768); cuBLAS's own heuristic picks its kernel with no tuning run. Used
// only where the whole computation is on one GPU (XLA cannot partition a custom call).
//
// Operands and result are row-major (JAX's default layout). Row-major X (p x q) is column-major
// X^T, so C^T = op(Y)^T op(X)^T is one column-major cuBLAS call with the same op flags and the
// operands swapped.
#include <cuComplex.h>
#include <cublas_v2.h>

#include <map>
#include <mutex>

#include "dynload.h"
#include "grid.h"

namespace jaxmg {
namespace {

// One cuBLAS handle per device, created on its first product and kept for the process.
cublasHandle_t device_handle() {
  static std::mutex mutex;
  static std::map<int, cublasHandle_t> handles;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& h = handles[device];
  if (!h) check_blas(api().cublasCreate(&h), "cublasCreate");
  return h;
}

// The real scalar v as each element type (alpha = 1, beta = 0 of the calls below).
template <typename T>
T scalar(double v) {
  return static_cast<T>(v);
}
template <>
cuComplex scalar<cuComplex>(double v) {
  return make_cuComplex((float)v, 0.0f);
}
template <>
cuDoubleComplex scalar<cuDoubleComplex>(double v) {
  return make_cuDoubleComplex(v, 0.0);
}

// cuBLAS's gemm and trmm of each element type, with alpha = 1 (and beta = 0).
#define JAXMG_GEMM_TRMM(T, GEMM, TRMM)                                                                       \
  cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,      \
                      const T* a, int lda, const T* b, int ldb, T* c, int ldc) {                              \
    const T alpha = scalar<T>(1.0), beta = scalar<T>(0.0);                                                   \
    return api().GEMM(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);                            \
  }                                                                                                          \
  cublasStatus_t trmm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,   \
                      cublasDiagType_t diag, int m, int n, const T* t, int ldt, const T* x, int ldx, T* c,    \
                      int ldc) {                                                                             \
    const T alpha = scalar<T>(1.0);                                                                          \
    return api().TRMM(h, side, uplo, op, diag, m, n, &alpha, t, ldt, x, ldx, c, ldc);                        \
  }

JAXMG_GEMM_TRMM(float, cublasSgemm, cublasStrmm)
JAXMG_GEMM_TRMM(double, cublasDgemm, cublasDtrmm)
JAXMG_GEMM_TRMM(cuComplex, cublasCgemm, cublasCtrmm)
JAXMG_GEMM_TRMM(cuDoubleComplex, cublasZgemm, cublasZtrmm)
#undef JAXMG_GEMM_TRMM

cublasOperation_t op_of(int64_t code) {
  switch (code) {
    case 0: return CUBLAS_OP_N;
    case 1: return CUBLAS_OP_T;
    case 2: return CUBLAS_OP_C;
    default: throw Failure(cat("jaxmg_gemm: op code ", code, " is not 0 (N), 1 (T) or 2 (C)"));
  }
}

// Row-major x (p x q), y (r x s): op_x(x) is m x k and op_y(y) is k x n; c is m x n.
template <typename T>
void product(cublasHandle_t h, const T* x, int64_t p, int64_t q, int64_t op_x, const T* y, int64_t r, int64_t s,
             int64_t op_y, T* c) {
  const int64_t m = op_x ? q : p, k = op_x ? p : q, n = op_y ? r : s;
  check_blas(gemm(h, op_of(op_y), op_of(op_x), (int)n, (int)m, (int)k, y, (int)s, x, (int)q, c, (int)n),
             "cublas gemm");
}

// Row-major triangular t (n x n, its stored triangle the lower one where `lower`) and x (r x s):
// c = op(t) x (left, n == r) or x op(t) (n == s). Column-major, t is t^T (the other triangle)
// and x is x^T, so c^T = x^T op(t)^T is cuBLAS's trmm on the other side with the same op.
template <typename T>
void triangular_product(cublasHandle_t h, const T* t, int64_t n, bool lower, int64_t op, bool unit, const T* x,
                        int64_t r, int64_t s, bool left, T* c) {
  check_blas(trmm(h, left ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT, lower ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
                  op_of(op), unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT, (int)s, (int)r, t, (int)n, x, (int)s, c,
                  (int)s),
             "cublas trmm");
}

// Runs fn(T{}) for the element type T of `type` (float32 to complex128); false for other types.
template <typename Fn>
bool with_type(ffi::DataType type, Fn&& fn) {
  switch (type) {
    case ffi::DataType::F32: fn(float{}); return true;
    case ffi::DataType::F64: fn(double{}); return true;
    case ffi::DataType::C64: fn(cuComplex{}); return true;
    case ffi::DataType::C128: fn(cuDoubleComplex{}); return true;
    default: return false;
  }
}

ffi::Error TrmmImpl(cudaStream_t stream, ffi::AnyBuffer t, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> c,
                    int64_t left, int64_t lower, int64_t op, int64_t unit) {
  auto td = t.dimensions(), xd = x.dimensions(), cd = c->dimensions();
  if (td.size() != 2 || xd.size() != 2 || cd.size() != 2 || td[0] != td[1])
    return ffi::Error::InvalidArgument("jaxmg_trmm: t must be a square matrix, x and the result matrices");
  if (t.element_type() != x.element_type() || c->element_type() != x.element_type())
    return ffi::Error::InvalidArgument("jaxmg_trmm: the operands and the result must have one dtype");
  const int64_t n = td[0], r = xd[0], s = xd[1];
  if ((left ? r : s) != n || cd[0] != r || cd[1] != s)
    return ffi::Error::InvalidArgument(cat("jaxmg_trmm: t is ", n, "x", n, ", x ", r, "x", s, ", the result ", cd[0],
                                           "x", cd[1], " (left: ", left, ")"));
  try {
    if (!api().blas) throw Failure("jaxmg_trmm: cuBLAS was not found in this process");
    if (r == 0 || s == 0) return ffi::Error::Success();
    cublasHandle_t h = device_handle();
    check_blas(api().cublasSetStream(h, stream), "cublasSetStream");
    bool known = with_type(x.element_type(), [&](auto zero_value) {
      using T = decltype(zero_value);
      triangular_product(h, static_cast<const T*>(t.untyped_data()), n, lower != 0, op, unit != 0,
                         static_cast<const T*>(x.untyped_data()), r, s, left != 0, static_cast<T*>(c->untyped_data()));
    });
    if (!known) return ffi::Error::InvalidArgument("jaxmg_trmm: float32, float64, complex64 or complex128 only");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

ffi::Error GemmImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> c,
                    int64_t op_x, int64_t op_y) {
  auto xd = x.dimensions(), yd = y.dimensions();
  if (xd.size() != 2 || yd.size() != 2 || c->dimensions().size() != 2)
    return ffi::Error::InvalidArgument("jaxmg_gemm: the operands and the result must be matrices");
  if (x.element_type() != y.element_type() || c->element_type() != x.element_type())
    return ffi::Error::InvalidArgument("jaxmg_gemm: the operands and the result must have one dtype");
  const int64_t p = xd[0], q = xd[1], r = yd[0], s = yd[1];
  const int64_t m = op_x ? q : p, k = op_x ? p : q, kk = op_y ? s : r, n = op_y ? r : s;
  if (k != kk || c->dimensions()[0] != m || c->dimensions()[1] != n)
    return ffi::Error::InvalidArgument(cat("jaxmg_gemm: shapes do not match: op(x) is ", m, "x", k, ", op(y) ", kk, "x",
                                           n, ", the result ", c->dimensions()[0], "x", c->dimensions()[1]));
  try {
    if (!api().blas) throw Failure("jaxmg_gemm: cuBLAS was not found in this process");
    if (m == 0 || n == 0) return ffi::Error::Success();
    if (k == 0) {
      check_cuda(cudaMemsetAsync(c->untyped_data(), 0, c->size_bytes(), stream), "cudaMemsetAsync(empty product)");
      return ffi::Error::Success();
    }
    cublasHandle_t h = device_handle();
    check_blas(api().cublasSetStream(h, stream), "cublasSetStream");
    bool known = with_type(x.element_type(), [&](auto zero_value) {
      using T = decltype(zero_value);
      product(h, static_cast<const T*>(x.untyped_data()), p, q, op_x, static_cast<const T*>(y.untyped_data()), r, s,
              op_y, static_cast<T*>(c->untyped_data()));
    });
    if (!known) return ffi::Error::InvalidArgument("jaxmg_gemm: float32, float64, complex64 or complex128 only");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_gemm, GemmImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()   // x, row-major
                                  .Arg<ffi::AnyBuffer>()   // y, row-major
                                  .Ret<ffi::AnyBuffer>()   // op(x) op(y), row-major
                                  .Attr<int64_t>("op_x")   // 0: x, 1: x^T, 2: x^H
                                  .Attr<int64_t>("op_y"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_trmm, TrmmImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()   // t, row-major, square
                                  .Arg<ffi::AnyBuffer>()   // x, row-major
                                  .Ret<ffi::AnyBuffer>()   // op(t) x or x op(t), row-major
                                  .Attr<int64_t>("left")   // 1: op(t) x, 0: x op(t)
                                  .Attr<int64_t>("lower")  // 1: t's stored triangle is its lower one
                                  .Attr<int64_t>("op")     // 0: t, 1: t^T, 2: t^H
                                  .Attr<int64_t>("unit")); // 1: t's diagonal is taken as ones

}  // namespace jaxmg
