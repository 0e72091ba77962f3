#include "trsolve.h"

#include <cuComplex.h>
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "dynload.h"
#include "grid.h"

namespace jaxmg {
namespace {

// Per element type: the NCCL type of its real parts, how many there are, the adjoint operation,
// and the two cuBLAS calls.
template <typename T>
struct Ops;

#define JAXMG_BLAS_OPS(T, NCCL, REALS, ADJ, ONE, MINUS_ONE, TRSM, GEMM)                                                \
  template <>                                                                                                          \
  struct Ops<T> {                                                                                                      \
    static constexpr ncclDataType_t nccl = NCCL;                                                                       \
    static constexpr int reals = REALS;                                                                                \
    static constexpr cublasOperation_t adjoint = ADJ;                                                                  \
    static T one() { return ONE; }                                                                                     \
    static T minus_one() { return MINUS_ONE; }                                                                         \
    static cublasStatus_t trsm(cublasHandle_t h, cublasOperation_t op, int m, int nrhs, const T* alpha, const T* l,    \
                               int ldl, T* b, int ldb) {                                                               \
      return api().TRSM(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, op, CUBLAS_DIAG_NON_UNIT, m, nrhs, alpha, l, ldl, \
                        b, ldb);                                                                                       \
    }                                                                                                                  \
    static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t op, int m, int nrhs, int k, const T* alpha,         \
                               const T* a, int lda, const T* b, int ldb, const T* beta, T* c, int ldc) {               \
      return api().GEMM(h, op, CUBLAS_OP_N, m, nrhs, k, alpha, a, lda, b, ldb, beta, c, ldc);                          \
    }                                                                                                                  \
  };

JAXMG_BLAS_OPS(float, ncclFloat, 1, CUBLAS_OP_T, 1.0f, -1.0f, cublasStrsm, cublasSgemm)
JAXMG_BLAS_OPS(double, ncclDouble, 1, CUBLAS_OP_T, 1.0, -1.0, cublasDtrsm, cublasDgemm)
JAXMG_BLAS_OPS(cuComplex, ncclFloat, 2, CUBLAS_OP_C, make_cuComplex(1.0f, 0.0f), make_cuComplex(-1.0f, 0.0f),
               cublasCtrsm, cublasCgemm)
JAXMG_BLAS_OPS(cuDoubleComplex, ncclDouble, 2, CUBLAS_OP_C, make_cuDoubleComplex(1.0, 0.0),
               make_cuDoubleComplex(-1.0, 0.0), cublasZtrsm, cublasZgemm)
#undef JAXMG_BLAS_OPS

template <typename T>
void solve(DeviceBuffer& work, ncclComm_t comm, const T* a, T* x, int64_t n, int64_t tile, int nproc, int rank,
           int64_t nrhs, cudaStream_t stream) {
  using O = Ops<T>;
  cublasHandle_t h = blas_handle(stream);  // one per device and stream (grid.h)
  const int64_t ntiles = n / tile, stage = tile * nrhs;
  const size_t want = (size_t)(n * nrhs + 2 * stage) * sizeof(T);
  work.ensure(want, "cudaMalloc(tiled solve workspace)");
  T* partial = static_cast<T*>(work.ptr);  // this member's partial sums: B - sum of its L_gj X_j
  T* send = partial + n * nrhs;            // one tile of right-hand sides, contiguous
  T* recv = send + stage;
  const T one = O::one(), minus_one = O::minus_one();
  const size_t pitch = (size_t)n * sizeof(T), tile_pitch = (size_t)tile * sizeof(T);
  const size_t count = (size_t)stage * O::reals;
  const int ld = (int)n;
  auto column = [&](int64_t g) { return a + (g / nproc) * tile * n; };  // owner's local column tile g
  auto copy_tile = [&](T* dst, size_t dpitch, const T* src, size_t spitch) {
    check_cuda(cudaMemcpy2DAsync(dst, dpitch, src, spitch, tile_pitch, (size_t)nrhs, cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpy2DAsync(right-hand-side tile)");
  };

  // Forward: L Y = B. Member 0's partial sums start at B, everyone else's at zero; the reduce of
  // tile g over all members is then B_g - sum_{j<g} L_gj Y_j on g's owner.
  if (rank == 0)
    check_cuda(cudaMemcpyAsync(partial, x, (size_t)(n * nrhs) * sizeof(T), cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync(partial sums)");
  else
    check_cuda(cudaMemsetAsync(partial, 0, (size_t)(n * nrhs) * sizeof(T), stream), "cudaMemsetAsync(partial sums)");
  for (int64_t g = 0; g < ntiles; ++g) {
    const int owner = (int)(g % nproc);
    T* xg = x + g * tile;
    if (nproc > 1) {
      copy_tile(send, tile_pitch, partial + g * tile, pitch);
      check_nccl(api().ncclReduce(send, recv, count, O::nccl, ncclSum, owner, comm, stream),
                 "ncclReduce(partial sums)");
      if (rank == owner) copy_tile(xg, pitch, recv, tile_pitch);
    } else {
      copy_tile(xg, pitch, partial + g * tile, pitch);
    }
    if (rank != owner) continue;
    const T* lg = column(g);
    check_blas(O::trsm(h, CUBLAS_OP_N, (int)tile, (int)nrhs, &one, lg + g * tile, ld, xg, ld), "cublas trsm (forward)");
    const int64_t below = n - (g + 1) * tile;
    if (below > 0)
      check_blas(O::gemm(h, CUBLAS_OP_N, (int)below, (int)nrhs, (int)tile, &minus_one, lg + (g + 1) * tile, ld, xg, ld,
                         &one, partial + (g + 1) * tile, ld),
                 "cublas gemm (forward update)");
  }

  // Backward: L^H X = Y. Tile g's owner has Y_g and every X_j (j > g) from the broadcasts.
  for (int64_t g = ntiles - 1; g >= 0; --g) {
    const int owner = (int)(g % nproc);
    T* xg = x + g * tile;
    if (rank == owner) {
      const T* lg = column(g);
      const int64_t below = n - (g + 1) * tile;
      if (below > 0)
        check_blas(O::gemm(h, O::adjoint, (int)tile, (int)nrhs, (int)below, &minus_one, lg + (g + 1) * tile, ld,
                           x + (g + 1) * tile, ld, &one, xg, ld),
                   "cublas gemm (backward update)");
      check_blas(O::trsm(h, O::adjoint, (int)tile, (int)nrhs, &one, lg + g * tile, ld, xg, ld),
                 "cublas trsm (backward)");
    }
    if (nproc > 1) {
      if (rank == owner) copy_tile(send, tile_pitch, xg, pitch);
      check_nccl(api().ncclBroadcast(send, send, count, O::nccl, owner, comm, stream), "ncclBroadcast(solution tile)");
      if (rank != owner) copy_tile(xg, pitch, send, tile_pitch);
    }
  }
}

}  // namespace

bool tiled_solve_available() { return api().blas; }

void tiled_potrs(DeviceBuffer& work, ncclComm_t comm, DType dtype, const void* a, void* x, int64_t n, int64_t tile,
                 int nproc, int rank, int64_t nrhs, cudaStream_t stream) {
  if (!api().blas) throw Failure("jaxmg native: the tiled solve needs cuBLAS, which was not found");
  if (n % (tile * nproc)) throw Failure("jaxmg native: the tiled solve needs n to be a multiple of tile * nproc");
  with_elem_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    solve(work, comm, static_cast<const T*>(a), static_cast<T*>(x), n, tile, nproc, rank, nrhs, stream);
  });
}

}  // namespace jaxmg
