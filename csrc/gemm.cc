// jaxmg_gemm: one matrix product on the calling GPU through cuBLAS, C = op(X) op(Y).
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

void check_blas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(call, cat("cuBLAS status ", (int)s));
}

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

template <typename T>
T one();
template <>
float one<float>() { return 1.0f; }
template <>
double one<double>() { return 1.0; }
template <>
cuComplex one<cuComplex>() { return make_cuComplex(1.0f, 0.0f); }
template <>
cuDoubleComplex one<cuDoubleComplex>() { return make_cuDoubleComplex(1.0, 0.0); }

template <typename T>
T zero();
template <>
float zero<float>() { return 0.0f; }
template <>
double zero<double>() { return 0.0; }
template <>
cuComplex zero<cuComplex>() { return make_cuComplex(0.0f, 0.0f); }
template <>
cuDoubleComplex zero<cuDoubleComplex>() { return make_cuDoubleComplex(0.0, 0.0); }

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a,
                    int lda, const float* b, int ldb, float* c, int ldc) {
  const float alpha = one<float>(), beta = zero<float>();
  return api().cublasSgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* a,
                    int lda, const double* b, int ldb, double* c, int ldc) {
  const double alpha = one<double>(), beta = zero<double>();
  return api().cublasDgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const cuComplex* a, int lda, const cuComplex* b, int ldb, cuComplex* c, int ldc) {
  const cuComplex alpha = one<cuComplex>(), beta = zero<cuComplex>();
  return api().cublasCgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const cuDoubleComplex* a, int lda, const cuDoubleComplex* b, int ldb, cuDoubleComplex* c,
                    int ldc) {
  const cuDoubleComplex alpha = one<cuDoubleComplex>(), beta = zero<cuDoubleComplex>();
  return api().cublasZgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}

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
    switch (x.element_type()) {
      case ffi::DataType::F32:
        product(h, x.typed_data<float>(), p, q, op_x, y.typed_data<float>(), r, s, op_y, c->typed_data<float>());
        break;
      case ffi::DataType::F64:
        product(h, x.typed_data<double>(), p, q, op_x, y.typed_data<double>(), r, s, op_y, c->typed_data<double>());
        break;
      case ffi::DataType::C64:
        product(h, static_cast<const cuComplex*>(x.untyped_data()), p, q, op_x,
                static_cast<const cuComplex*>(y.untyped_data()), r, s, op_y, static_cast<cuComplex*>(c->untyped_data()));
        break;
      case ffi::DataType::C128:
        product(h, static_cast<const cuDoubleComplex*>(x.untyped_data()), p, q, op_x,
                static_cast<const cuDoubleComplex*>(y.untyped_data()), r, s, op_y,
                static_cast<cuDoubleComplex*>(c->untyped_data()));
        break;
      default:
        return ffi::Error::InvalidArgument("jaxmg_gemm: float32, float64, complex64 or complex128 only");
    }
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

}  // namespace jaxmg
