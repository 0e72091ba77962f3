// The solve of potrs on a 1 x P grid, by tiles: cuBLAS on each member's own tiles and one small
// NCCL collective per tile, instead of cuSOLVERMp's potrs (whose per-tile synchronisation
// dominates for few right-hand sides).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>

#include "dtype.h"

namespace jaxmg {

struct DeviceBuffer;  // grid.h

// Whether cuBLAS was found (the tiled solve can run).
bool tiled_solve_available();

// Solves L L^H X = B in place in x, for the lower factor L that cuSOLVERMp's potrf (uplo=LOWER)
// left on a 1 x P grid: member q (NCCL rank q) holds every row of the global column tiles
// g = q + l P (l = 0, 1, ...), column-major with leading dimension n, at a. x is n x nrhs,
// column-major (leading dimension n), and holds B, whole, on every member; on return it holds
// X, whole, on every member. Forward substitution fans in (per tile, the partial sums of all
// members are reduced onto the tile's owner, which solves the diagonal tile and updates its own
// partial sums below it); backward substitution fans out (the owner of tile g subtracts its
// column's contribution, solves, and broadcasts X's tile g). Throws std::runtime_error naming the
// failed call. `work` is what the tiled solve keeps per grid member, the caller's device buffer,
// grown where it is smaller than the solve needs (one right-hand-side-sized accumulator and two
// one-tile staging buffers). Its cuBLAS calls use the stream's handle (blas_handle, grid.h), as
// the one-GPU products do.
void tiled_potrs(DeviceBuffer& work, ncclComm_t comm, DType dtype, const void* a, void* x, int64_t n, int64_t tile,
                 int nproc, int rank, int64_t nrhs, cudaStream_t stream);

}  // namespace jaxmg
