// jaxmg_gemm and jaxmg_trmm: matrix products on the calling GPU through cuBLAS, C = op(X) op(Y),
// and C = op(T) X or X op(T) for triangular T (cuBLAS's out-of-place trmm: one call, no wasted
// flops on the zero triangle). jaxmg_potri: A^-1 from A's Cholesky factor on the calling GPU,
// LAPACK's potri (trtri, then lauum) as a recursion of cuBLAS calls on the factor's own buffer.
// jaxmg_getri: A^-1 from A's packed LU factor, LAPACK's getri (trtri, then a solve with L by
// panels of columns, then the column interchanges), also in the factor's own buffer.
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

#include <algorithm>
#include <map>
#include <mutex>
#include <type_traits>

#include "codes.h"
#include "dynload.h"
#include "grid.h"
#include "layout.h"

namespace jaxmg {
namespace {

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

// cuBLAS's gemm, trmm, trsm and herk (syrk for real types) of each element type: trmm and trsm
// with alpha = 1, gemm and herk with the given real alpha (``scale``) and beta (``keep``).
#define JAXMG_GEMM_TRMM(T, R, GEMM, TRMM, TRSM, HERK)                                                                 \
  cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* a,  \
                      int lda, const T* b, int ldb, T* c, int ldc, double scale = 1.0, double keep = 0.0) {           \
    const T alpha = scalar<T>(scale), beta = scalar<T>(keep);                                                         \
    return api().GEMM(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);                                     \
  }                                                                                                                   \
  cublasStatus_t trmm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,           \
                      cublasDiagType_t diag, int m, int n, const T* t, int ldt, const T* x, int ldx, T* c, int ldc) { \
    const T alpha = scalar<T>(1.0);                                                                                   \
    return api().TRMM(h, side, uplo, op, diag, m, n, &alpha, t, ldt, x, ldx, c, ldc);                                 \
  }                                                                                                                   \
  cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,           \
                      cublasDiagType_t diag, int m, int n, const T* t, int ldt, T* b, int ldb) {                      \
    const T alpha = scalar<T>(1.0);                                                                                   \
    return api().TRSM(h, side, uplo, op, diag, m, n, &alpha, t, ldt, b, ldb);                                         \
  }                                                                                                                   \
  cublasStatus_t herk(cublasHandle_t h, cublasFillMode_t uplo, int n, int k, double scale, const T* a, int lda,       \
                      double keep, T* c, int ldc) {                                                                   \
    const R alpha = static_cast<R>(scale), beta = static_cast<R>(keep);                                               \
    return api().HERK(h, uplo, CUBLAS_OP_N, n, k, &alpha, a, lda, &beta, c, ldc);                                     \
  }

JAXMG_GEMM_TRMM(float, float, cublasSgemm, cublasStrmm, cublasStrsm, cublasSsyrk)
JAXMG_GEMM_TRMM(double, double, cublasDgemm, cublasDtrmm, cublasDtrsm, cublasDsyrk)
JAXMG_GEMM_TRMM(cuComplex, float, cublasCgemm, cublasCtrmm, cublasCtrsm, cublasCherk)
JAXMG_GEMM_TRMM(cuDoubleComplex, double, cublasZgemm, cublasZtrmm, cublasZtrsm, cublasZherk)
#undef JAXMG_GEMM_TRMM

// cuBLAS's operation of an op code (codes.h: op_n, op_t, op_c).
cublasOperation_t op_of(int64_t code) {
  if (code == codes::op_n) return CUBLAS_OP_N;
  if (code == codes::op_t) return CUBLAS_OP_T;
  if (code == codes::op_c) return CUBLAS_OP_C;
  throw Failure(cat("jaxmg_gemm: op code ", code, " is not 0 (N), 1 (T) or 2 (C)"));
}

// Row-major x (p x q), y (r x s): op_x(x) is m x k and op_y(y) is k x n; c is m x n.
template <typename T>
void product(cublasHandle_t h, const T* x, int64_t p, int64_t q, int64_t op_x, const T* y, int64_t r, int64_t s,
             int64_t op_y, T* c) {
  const bool tx = op_x != codes::op_n, ty = op_y != codes::op_n;
  const int64_t m = tx ? q : p, k = tx ? p : q, n = ty ? r : s;
  check_blas(gemm(h, op_of(op_y), op_of(op_x), (int)n, (int)m, (int)k, y, (int)s, x, (int)q, c, (int)n), "cublas gemm");
}

// Row-major triangular t (n x n, its stored triangle the lower one where `lower`) and x (r x s):
// c = op(t) x (left, n == r) or x op(t) (n == s). Column-major, t is t^T (the other triangle)
// and x is x^T, so c^T = x^T op(t)^T is cuBLAS's trmm on the other side with the same op.
template <typename T>
void triangular_product(cublasHandle_t h, const T* t, int64_t n, bool lower, int64_t op, bool unit, const T* x,
                        int64_t r, int64_t s, bool left, T* c) {
  check_blas(
      trmm(h, left ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT, lower ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
           op_of(op), unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT, (int)s, (int)r, t, (int)n, x, (int)s, c, (int)s),
      "cublas trmm");
}

// Where to halve an order-n problem: a multiple of 128 where n is large (as
// jaxmg/kernels/triangular.py's _split).
int64_t split_order(int64_t n) {
  const int64_t half = n / 2;
  return half >= 256 ? (half / 128) * 128 : half;
}

// The triangular inverse (trtri) and the product of a triangular inverse with its adjoint (lauum)
// of LAPACK's potri and getri, on one GPU, in place, on the column-major upper triangle of a
// buffer. potri: the row-major lower factor L is the column-major upper triangular U = L^T (a
// column-major L is first mirrored into U = L^H in place). trtri makes U^-1 = V (upper), lauum
// then X = V V^H, whose column-major upper triangle is, for a row-major factor, the row-major
// lower triangle of X^T = conj(X) = L^-H L^-1 = A^-1 (for a column-major one, A^-1's own upper
// triangle). getri: trtri inverts the U of a column-major LU factor (lu_inverse_in_place). Only
// the upper triangle (column-major) is read or written, apart from the diagonal blocks of order
// at most `leaf` or `trmm_leaf`, below whose diagonal trtri writes zeros.
//
// Every step recurses on halves down to cuBLAS gemm calls on the buffer itself, as
// jaxmg/kernels/triangular.py does in JAX, but with no slices, sums or concatenations: the
// triangular products (trmm) and Hermitian rank-k updates (herk) are done in place, the
// off-diagonal part of each as one gemm that accumulates into its block (beta = 1). A triangular
// product with a diagonal block of order at most `trmm_leaf` is a gemm with the whole block
// (trtri leaves zeros below the diagonal of those blocks) on each `chunk` of the operand's columns
// or rows, through a scratch copy of that chunk (so that the scratch is a fixed size, not a
// part of the matrix): cuBLAS's own trmm runs below gemm speed there. Updates of diagonal
// blocks of order at most `herk_leaf` are one cuBLAS herk. Diagonal blocks of order at most
// `leaf` are inverted by one trsm against the identity through a leaf x leaf scratch buffer.
// Column-major (i, j) of the buffer is a[i + j lda].
template <typename T>
struct InPlaceInverse {
  cublasHandle_t h;
  cudaStream_t stream;
  T* a;
  int64_t lda;
  const T* eye;
  T* scratch;  // leaf x leaf
  T* operand;  // min(trmm_leaf, lda) x chunk: a part of the operand of a leaf triangular product
  int64_t leaf, trmm_leaf, herk_leaf;
  int64_t chunk;  // a leaf triangular product runs over this many columns (left) or rows (right) of x at a time

  T* at(int64_t i, int64_t j) const { return a + i + j * lda; }

  // the rows x cols block at src (leading dimension ld_src) to dst (leading dimension ld_dst)
  void copy(T* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows, int64_t cols) const;

  // c (m x n) = alpha op_a(a) op_b(b) + c, every operand in the buffer (leading dimension lda)
  void accumulate(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const T* x, const T* y, T* c) const;

  // x := alpha op(t) x (left; x is n x m) or alpha x op(t) (right; x is m x n), in place, for
  // upper triangular t of order n at `t` and op N or C. With t = [[T11, T12], [0, T22]]:
  //   left N:  x1 = T11 x1 + T12 x2, x2 = T22 x2;    left C:  x1 = T11^H x1, x2 = T12^H x1 + T22^H x2;
  //   right N: x1 = x1 T11, x2 = x1 T12 + x2 T22;    right C: x1 = x1 T11^H + x2 T12^H, x2 = x2 T22^H;
  // each block is updated after the blocks it reads.
  void trmm_in_place(bool left, cublasOperation_t op, const T* t, int64_t n, T* x, int64_t m, double alpha) const;

  // The upper triangle of c (order n) += x x^H for x (n x k): c11 += x1 x1^H, c12 += x1 x2^H,
  // c22 += x2 x2^H.
  void herk_in_place(T* c, int64_t n, const T* x, int64_t k) const;

  // [[U11, U12], [0, U22]]^-1 = [[V11, -V11 U12 V22], [0, V22]]
  void trtri(int64_t o, int64_t n) const;

  // [[V11, V12], [0, V22]] [[V11, V12], [0, V22]]^H, upper triangle:
  // [[V11 V11^H + V12 V12^H, V12 V22^H], [., V22 V22^H]]
  void lauum(int64_t o, int64_t n) const;
};

template <typename T>
void InPlaceInverse<T>::copy(T* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows, int64_t cols) const {
  check_cuda(cudaMemcpy2DAsync(dst, ld_dst * sizeof(T), src, ld_src * sizeof(T), rows * sizeof(T), cols,
                               cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpy2DAsync(potri)");
}

template <typename T>
void InPlaceInverse<T>::accumulate(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k,
                                   double alpha, const T* x, const T* y, T* c) const {
  check_blas(gemm(h, op_a, op_b, (int)m, (int)n, (int)k, x, (int)lda, y, (int)lda, c, (int)lda, alpha, 1.0),
             "cublas gemm (potri)");
}

template <typename T>
void InPlaceInverse<T>::trmm_in_place(bool left, cublasOperation_t op, const T* t, int64_t n, T* x, int64_t m,
                                      double alpha) const {
  if (n <= trmm_leaf) {  // x := alpha op(t) x by gemms with the whole block t (zero below), each on
                         // `chunk` columns (left) or rows (right) of x copied into the operand scratch
    for (int64_t s = 0; s < m; s += chunk) {
      const int64_t w = std::min(chunk, m - s);
      // x (n x m): its columns s..s+w (left), or x (m x n): its rows s..s+w, as `rows` x `cols`
      const int64_t rows = left ? n : w, cols = left ? w : n;
      T* xs = left ? x + s * lda : x + s;
      copy(operand, rows, xs, lda, rows, cols);
      check_blas(left ? gemm(h, op, CUBLAS_OP_N, (int)n, (int)w, (int)n, t, (int)lda, operand, (int)n, xs, (int)lda,
                             alpha, 0.0)
                      : gemm(h, CUBLAS_OP_N, op, (int)w, (int)n, (int)n, operand, (int)w, t, (int)lda, xs, (int)lda,
                             alpha, 0.0),
                 "cublas gemm (potri)");
    }
    return;
  }
  const int64_t n1 = split_order(n), n2 = n - n1;
  const T *t11 = t, *t12 = t + n1 * lda, *t22 = t + n1 + n1 * lda;
  T *x1 = x, *x2 = left ? x + n1 : x + n1 * lda;  // rows (left) or columns (right) n1..n
  // As the table above: the half done first (xf) reads the other (xs) as it was; that is x1 where
  // left == (op is N), x2 otherwise.
  const bool x1_first = left == (op == CUBLAS_OP_N);
  T *xf = x1_first ? x1 : x2, *xs = x1_first ? x2 : x1;
  const T *tf = x1_first ? t11 : t22, *ts = x1_first ? t22 : t11;
  const int64_t nf = x1_first ? n1 : n2, ns = x1_first ? n2 : n1;
  trmm_in_place(left, op, tf, nf, xf, m, alpha);
  if (left)  // xf += op(T12) xs
    accumulate(op, CUBLAS_OP_N, nf, m, ns, alpha, t12, xs, xf);
  else  // xf += xs op(T12)
    accumulate(CUBLAS_OP_N, op, m, nf, ns, alpha, xs, t12, xf);
  trmm_in_place(left, op, ts, ns, xs, m, alpha);
}

template <typename T>
void InPlaceInverse<T>::herk_in_place(T* c, int64_t n, const T* x, int64_t k) const {
  if (n <= herk_leaf) {
    check_blas(herk(h, CUBLAS_FILL_MODE_UPPER, (int)n, (int)k, 1.0, x, (int)lda, 1.0, c, (int)lda),
               "cublas herk (potri)");
    return;
  }
  const int64_t n1 = split_order(n), n2 = n - n1;
  herk_in_place(c, n1, x, k);
  accumulate(CUBLAS_OP_N, CUBLAS_OP_C, n1, n2, k, 1.0, x, x + n1, c + n1 * lda);
  herk_in_place(c + n1 + n1 * lda, n2, x + n1, k);
}

template <typename T>
void InPlaceInverse<T>::trtri(int64_t o, int64_t n) const {
  if (n <= leaf) {
    copy(scratch, leaf, eye, leaf, n, n);
    check_blas(trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, (int)n, (int)n,
                    at(o, o), (int)lda, scratch, (int)leaf),
               "cublas trsm (potri)");
    copy(at(o, o), lda, scratch, leaf, n, n);  // V, and exact zeros below its diagonal
    return;
  }
  const int64_t n1 = split_order(n), n2 = n - n1;
  trtri(o, n1);
  trtri(o + n1, n2);
  if (n <= trmm_leaf)  // the block is a whole operand of the leaf products: zero below its diagonal
    check_cuda(cudaMemset2DAsync(at(o + n1, o), lda * sizeof(T), 0, n2 * sizeof(T), n1, stream),
               "cudaMemset2DAsync(potri)");
  T* a12 = at(o, o + n1);
  trmm_in_place(true, CUBLAS_OP_N, at(o, o), n1, a12, n2, 1.0);
  trmm_in_place(false, CUBLAS_OP_N, at(o + n1, o + n1), n2, a12, n1, -1.0);
}

template <typename T>
void InPlaceInverse<T>::lauum(int64_t o, int64_t n) const {
  if (n <= leaf) {
    copy(scratch, leaf, at(o, o), lda, n, n);  // V's block, zero below the diagonal
    check_blas(herk(h, CUBLAS_FILL_MODE_UPPER, (int)n, (int)n, 1.0, scratch, (int)leaf, 0.0, at(o, o), (int)lda),
               "cublas herk (potri)");
    return;
  }
  const int64_t n1 = split_order(n), n2 = n - n1;
  T* a12 = at(o, o + n1);
  lauum(o, n1);
  herk_in_place(at(o, o), n1, a12, n2);
  trmm_in_place(false, CUBLAS_OP_C, at(o + n1, o + n1), n2, a12, n1, 1.0);
  lauum(o + n1, n2);
}

// The maximal diagonal blocks (o, m) of order at most `bound` in the halving that trtri and
// trmm_in_place follow (split_order): below their diagonals, and nowhere else below the whole
// matrix's diagonal, trtri writes (zeros, or whole leaf blocks).
template <typename F>
void leaf_diagonal_blocks(int64_t o, int64_t n, int64_t bound, F&& each) {
  if (n <= bound) {
    each(o, n);
    return;
  }
  const int64_t n1 = split_order(n);
  leaf_diagonal_blocks(o, n1, bound, each);
  leaf_diagonal_blocks(o + n1, n - n1, bound, each);
}

// LAPACK's getri on one GPU, in place, on the column-major packed LU of P A = L U (L unit lower
// in the strict lower triangle, U upper): A^-1 = U^-1 L^-1 P. With panel = work's columns
// (work: n x panel, column-major, leading dimension n):
//   1. U := U^-1 by run.trtri. The strict lower parts of the diagonal blocks that trtri
//      overwrites (order at most `panel`) hold L: they are kept in `work` and put back.
//   2. X L = U^-1 by panels of columns j, right to left: the panel's part of L (below its
//      diagonal) moves to `work` (zeros left in its place, so that the panel holds U^-1's
//      columns), X[:, j] -= X[:, j+panel:] L[j+panel:, j] (one gemm), then
//      X[:, j] := X[:, j] L[j, j]^-1 (one trsm with the panel's unit lower diagonal block).
//   3. A^-1[:, perm[k]] = X[:, k]: by blocks of `panel` rows, each scattered into `work`
//      (panel x n) and copied back.
// perm (n, int32, on the device): row perm[k] of A is row k of P A.
template <typename T>
void lu_inverse_in_place(const InPlaceInverse<T>& run, const int32_t* perm, T* work, int64_t panel) {
  const int64_t n = run.lda, lda = run.lda;
  const int elem = (int)sizeof(T);
  leaf_diagonal_blocks(0, n, panel, [&](int64_t o, int64_t m) {
    check_cuda(move_strict_lower(run.at(o, o), lda, m, m, work + o, n, false, elem, run.stream),
               "move_strict_lower(getri)");
  });
  run.trtri(0, n);
  leaf_diagonal_blocks(0, n, panel, [&](int64_t o, int64_t m) {
    check_cuda(move_strict_lower(work + o, n, m, m, run.at(o, o), lda, false, elem, run.stream),
               "move_strict_lower(getri)");
  });
  for (int64_t j = ((n - 1) / panel) * panel; j >= 0; j -= panel) {
    const int64_t jb = std::min(panel, n - j), rest = n - j - jb;
    check_cuda(move_strict_lower(run.at(j, j), lda, n - j, jb, work, n, true, elem, run.stream),
               "move_strict_lower(getri)");
    if (rest > 0)
      check_blas(gemm(run.h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)jb, (int)rest, run.at(0, j + jb), (int)lda,
                      work + jb, (int)n, run.at(0, j), (int)lda, -1.0, 1.0),
                 "cublas gemm (getri)");
    check_blas(trsm(run.h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, (int)n, (int)jb,
                    work, (int)n, run.at(0, j), (int)lda),
               "cublas trsm (getri)");
  }
  for (int64_t r = 0; r < n; r += panel) {
    const int64_t rows = std::min(panel, n - r);
    check_cuda(scatter_columns(run.at(r, 0), lda, rows, n, perm, work, rows, elem, run.stream),
               "scatter_columns(getri)");
    run.copy(run.at(r, 0), lda, work, rows, rows, n);
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
  DType dtype;
  if (ffi::Error e = check_dtype("jaxmg_trmm", x.element_type(), &dtype); e.failure()) return e;
  try {
    if (!api().blas) throw Failure("jaxmg_trmm: cuBLAS was not found in this process");
    if (r == 0 || s == 0) return ffi::Error::Success();
    cublasHandle_t h = blas_handle(stream);
    with_elem_type(dtype, [&](auto zero) {
      using T = decltype(zero);
      triangular_product(h, static_cast<const T*>(t.untyped_data()), n, lower != 0, op, unit != 0,
                         static_cast<const T*>(x.untyped_data()), r, s, left != 0, static_cast<T*>(c->untyped_data()));
    });
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
  const bool tx = op_x != codes::op_n, ty = op_y != codes::op_n;
  const int64_t m = tx ? q : p, k = tx ? p : q, kk = ty ? s : r, n = ty ? r : s;
  if (k != kk || c->dimensions()[0] != m || c->dimensions()[1] != n)
    return ffi::Error::InvalidArgument(cat("jaxmg_gemm: shapes do not match: op(x) is ", m, "x", k, ", op(y) ", kk, "x",
                                           n, ", the result ", c->dimensions()[0], "x", c->dimensions()[1]));
  DType dtype;
  if (ffi::Error e = check_dtype("jaxmg_gemm", x.element_type(), &dtype); e.failure()) return e;
  try {
    if (!api().blas) throw Failure("jaxmg_gemm: cuBLAS was not found in this process");
    if (m == 0 || n == 0) return ffi::Error::Success();
    if (k == 0) {
      check_cuda(cudaMemsetAsync(c->untyped_data(), 0, c->size_bytes(), stream), "cudaMemsetAsync(empty product)");
      return ffi::Error::Success();
    }
    cublasHandle_t h = blas_handle(stream);
    with_elem_type(dtype, [&](auto zero) {
      using T = decltype(zero);
      product(h, static_cast<const T*>(x.untyped_data()), p, q, op_x, static_cast<const T*>(y.untyped_data()), r, s,
              op_y, static_cast<T*>(c->untyped_data()));
    });
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// What potri and getri share: the checks of a square factor (order n), a leaf x leaf identity and
// results of the factor's dtype (the inverse, leaf x leaf and min(trmm_leaf, n) x chunk scratch,
// 1 <= chunk <= n, InPlaceInverse's chunk; the caller's own operands pass `others_fit`), the
// factor's copy in `inverse` unless they alias, and
// `body(run, dtype)` with the InPlaceInverse of the factor's element type on `inverse`.
template <typename Body>
ffi::Error in_place_inverse(const char* name, cudaStream_t stream, ffi::AnyBuffer factor, ffi::AnyBuffer eye,
                            ffi::Result<ffi::AnyBuffer>& inverse, ffi::Result<ffi::AnyBuffer>& scratch,
                            ffi::Result<ffi::AnyBuffer>& operand, int64_t trmm_leaf, int64_t herk_leaf, bool others_fit,
                            Body&& body) {
  auto fd = factor.dimensions(), ed = eye.dimensions(), id = inverse->dimensions(), sd = scratch->dimensions();
  auto od = operand->dimensions();
  if (fd.size() != 2 || fd[0] != fd[1] || ed.size() != 2 || ed[0] != ed[1] || id.size() != 2 || sd.size() != 2)
    return ffi::Error::InvalidArgument(cat(name, ": the factor and the identity must be square matrices"));
  const int64_t n = fd[0], leaf = ed[0];
  if (id[0] != n || id[1] != n || sd[0] != leaf || sd[1] != leaf || leaf < 1 || trmm_leaf < 1 || herk_leaf < 1 ||
      od.size() != 2 || od[0] != std::min(trmm_leaf, n) || od[1] < std::min<int64_t>(1, n) || od[1] > n || !others_fit)
    return ffi::Error::InvalidArgument(
        cat(name, ": the factor is ", n, "x", n, ", the identity ", leaf, "x", leaf, ", the results ", id[0], "x",
            id[1], ", ", sd[0], "x", sd[1], " and ", od.size() == 2 ? od[0] : -1, "x", od.size() == 2 ? od[1] : -1,
            ", the leaves ", trmm_leaf, " and ", herk_leaf, others_fit ? "" : "; the other operands do not fit them"));
  const auto type = factor.element_type();
  if (eye.element_type() != type || inverse->element_type() != type || scratch->element_type() != type ||
      operand->element_type() != type)
    return ffi::Error::InvalidArgument(cat(name, ": the operands and the results must have one dtype"));
  DType dtype;
  if (ffi::Error e = check_dtype(name, type, &dtype); e.failure()) return e;
  try {
    if (!api().blas) throw Failure(cat(name, ": cuBLAS was not found in this process"));
    if (n == 0) return ffi::Error::Success();
    copy_unless_aliased(*inverse, factor, stream, "cudaMemcpyAsync(factor to inverse)");
    cublasHandle_t h = blas_handle(stream);
    with_elem_type(dtype, [&](auto zero) {
      using T = decltype(zero);
      InPlaceInverse<T> run{h,
                            stream,
                            static_cast<T*>(inverse->untyped_data()),
                            n,
                            static_cast<const T*>(eye.untyped_data()),
                            static_cast<T*>(scratch->untyped_data()),
                            static_cast<T*>(operand->untyped_data()),
                            leaf,
                            trmm_leaf,
                            herk_leaf,
                            od[1]};
      body(run, dtype);
    });
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

ffi::Error PotriImpl(cudaStream_t stream, ffi::AnyBuffer factor, ffi::AnyBuffer eye,
                     ffi::Result<ffi::AnyBuffer> inverse, ffi::Result<ffi::AnyBuffer> scratch,
                     ffi::Result<ffi::AnyBuffer> operand, int64_t trmm_leaf, int64_t herk_leaf, int64_t column_major) {
  return in_place_inverse("jaxmg_potri", stream, factor, eye, inverse, scratch, operand, trmm_leaf, herk_leaf, true,
                          [&](auto& run, DType dtype) {
                            if (column_major)  // L column-major: its upper triangle becomes U = L^H, as the
                                               // row-major case reads it
                              check_cuda(mirror(run.a, run.lda, run.lda, false, dtype, stream), "mirror(potri factor)");
                            run.trtri(0, run.lda);
                            run.lauum(0, run.lda);
                            check_cuda(mirror(run.a, run.lda, run.lda, true, dtype, stream), "mirror(potri)");
                          });
}

ffi::Error GetriImpl(cudaStream_t stream, ffi::AnyBuffer lu, ffi::Buffer<ffi::S32> permutation, ffi::AnyBuffer eye,
                     ffi::Result<ffi::AnyBuffer> inverse, ffi::Result<ffi::AnyBuffer> scratch,
                     ffi::Result<ffi::AnyBuffer> operand, ffi::Result<ffi::AnyBuffer> work, int64_t trmm_leaf) {
  auto fd = lu.dimensions(), ed = eye.dimensions(), wd = work->dimensions(), pd = permutation.dimensions();
  const int64_t n = fd.size() == 2 ? fd[0] : -1, leaf = ed.size() == 2 ? ed[0] : -1;
  const int64_t panel = wd.size() == 2 ? wd[0] : -1;  // at least both leaves: trtri writes within them
  const bool fit = pd.size() == 1 && pd[0] == n && wd.size() == 2 && wd[1] == n && panel >= 1 &&
                   panel >= std::min(std::max(leaf, trmm_leaf), n) && work->element_type() == lu.element_type();
  return in_place_inverse(
      "jaxmg_getri", stream, lu, eye, inverse, scratch, operand, trmm_leaf, trmm_leaf, fit, [&](auto& run, DType) {
        using T = std::remove_reference_t<decltype(*run.a)>;
        lu_inverse_in_place(run, permutation.typed_data(), static_cast<T*>(work->untyped_data()), panel);
      });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_potri, PotriImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()            // L in its lower triangle (the other is not read)
                                  .Arg<ffi::AnyBuffer>()            // the identity of the leaf order
                                  .Ret<ffi::AnyBuffer>()            // A^-1, both triangles, in L's layout (aliases L)
                                  .Ret<ffi::AnyBuffer>()            // leaf x leaf scratch
                                  .Ret<ffi::AnyBuffer>()            // min(trmm_leaf, n) x chunk scratch, chunk <= n
                                  .Attr<int64_t>("trmm_leaf")       // triangular products by one gemm up to this order
                                  .Attr<int64_t>("herk_leaf")       // rank-k updates by one herk up to this order
                                  .Attr<int64_t>("column_major"));  // 1: L and A^-1 column-major, 0: row-major

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_getri, GetriImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()         // the packed L and U of P A = L U, column-major
                                  .Arg<ffi::Buffer<ffi::S32>>()  // perm: row perm[k] of A is row k of P A
                                  .Arg<ffi::AnyBuffer>()         // the identity of the leaf order
                                  .Ret<ffi::AnyBuffer>()         // A^-1, column-major (aliases the factor)
                                  .Ret<ffi::AnyBuffer>()         // leaf x leaf scratch
                                  .Ret<ffi::AnyBuffer>()         // min(trmm_leaf, n) x chunk scratch, chunk <= n
                                  .Ret<ffi::AnyBuffer>()         // panel x n scratch (panel >= both leaves)
                                  .Attr<int64_t>("trmm_leaf"));  // triangular products by one gemm up to this order

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_gemm, GemmImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x, row-major
                                  .Arg<ffi::AnyBuffer>()  // y, row-major
                                  .Ret<ffi::AnyBuffer>()  // op(x) op(y), row-major
                                  .Attr<int64_t>("op_x")  // 0: x, 1: x^T, 2: x^H
                                  .Attr<int64_t>("op_y"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_trmm, TrmmImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()    // t, row-major, square
                                  .Arg<ffi::AnyBuffer>()    // x, row-major
                                  .Ret<ffi::AnyBuffer>()    // op(t) x or x op(t), row-major
                                  .Attr<int64_t>("left")    // 1: op(t) x, 0: x op(t)
                                  .Attr<int64_t>("lower")   // 1: t's stored triangle is its lower one
                                  .Attr<int64_t>("op")      // 0: t, 1: t^T, 2: t^H
                                  .Attr<int64_t>("unit"));  // 1: t's diagonal is taken as ones

}  // namespace jaxmg
