#include "layout.h"

#include <cuComplex.h>

#include <algorithm>

#include "scalar.cuh"

namespace jaxmg {
namespace {

struct alignas(16) Elem16 {
  uint64_t lo, hi;
};

template <int B>
struct ElemOf;
template <>
struct ElemOf<4> {
  using type = uint32_t;
};
template <>
struct ElemOf<8> {
  using type = uint64_t;
};
template <>
struct ElemOf<16> {
  using type = Elem16;
};

__device__ __forceinline__ int64_t sigma(int64_t g, int64_t K, int64_t P) { return (g % P) * (K / P) + g / P; }

// Column blockIdx.x, rows t (mod tile) of every row tile: new tile g(i) = old tile g(i+1) along
// each cycle, through one register.
template <typename E>
__global__ void permute_row_tiles_kernel(E* __restrict__ a, int64_t ld, int64_t tile,
                                         const int32_t* __restrict__ cycles, int64_t cycles_len) {
  E* col = a + (int64_t)blockIdx.x * ld;
  for (int64_t t = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; t < tile; t += (int64_t)gridDim.y * blockDim.x) {
    for (int64_t i = 0; i < cycles_len;) {
      const int32_t len = cycles[i];
      const int32_t* g = cycles + i + 1;
      E first = col[g[0] * tile + t];
      for (int32_t k = 0; k + 1 < len; ++k) col[g[k] * tile + t] = col[g[k + 1] * tile + t];
      col[g[len - 1] * tile + t] = first;
      i += len + 1;
    }
  }
}

// scratch[c*rb + i] = a[c*ld + r0 + i]
template <typename E>
__global__ void pack_rows_kernel(E* __restrict__ scratch, const E* __restrict__ a, int64_t ld, int64_t r0, int64_t rb,
                                 int64_t cols) {
  int64_t total = rb * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i / rb, r = i % rb;
    scratch[i] = a[c * ld + r0 + r];
  }
}

// a[c*ld + r0 + i] = scratch[scol(c)*rb + i]
template <typename E>
__global__ void unpack_cols_kernel(E* __restrict__ a, int64_t ld, const E* __restrict__ scratch, int64_t r0, int64_t rb,
                                   int64_t cols, int64_t tile, int64_t K, int64_t P) {
  int64_t total = rb * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i / rb, r = i % rb;
    int64_t sc = sigma(c / tile, K, P) * tile + c % tile;
    a[c * ld + r0 + r] = scratch[sc * rb + r];
  }
}

int blocks_for(int64_t n) { return (int)std::min<int64_t>((n + 255) / 256, 65535 * 8); }

template <typename E>
cudaError_t reorder_cols_impl(E* a, int64_t rows, int64_t cols, int64_t ld, int64_t tile, int64_t P, E* scratch,
                              int64_t scratch_elems, cudaStream_t stream) {
  int64_t K = cols / tile;
  int64_t rb = std::max<int64_t>(1, std::min<int64_t>(rows, scratch_elems / cols));
  for (int64_t r0 = 0; r0 < rows; r0 += rb) {
    int64_t nr = std::min(rb, rows - r0);
    pack_rows_kernel<E><<<blocks_for(nr * cols), 256, 0, stream>>>(scratch, a, ld, r0, nr, cols);
    unpack_cols_kernel<E><<<blocks_for(nr * cols), 256, 0, stream>>>(a, ld, scratch, r0, nr, cols, tile, K, P);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <typename T, typename R>
__global__ void logdet_kernel(const T* __restrict__ a, int64_t ld, int64_t n_global, int64_t tile, int64_t Pr,
                              int64_t Pc, int64_t p, int64_t q, R* out) {
  __shared__ double part[1024];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n_global; i += blockDim.x) {
    int64_t g = i / tile, t = i % tile;
    if (g % Pr != p || g % Pc != q) continue;
    int64_t r = (g / Pr) * tile + t, c = (g / Pc) * tile + t;
    s += log((double)scalar::re(a[c * ld + r]));
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = (R)part[0];
}

__global__ void fill_kernel(int32_t* dst, int64_t count, int32_t value) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = value;
}

}  // namespace

std::vector<int32_t> sigma_cycles(int64_t K, int64_t P) {
  std::vector<int32_t> out;
  std::vector<char> seen(K, 0);
  for (int64_t g0 = 0; g0 < K; ++g0) {
    if (seen[g0]) continue;
    std::vector<int32_t> cycle;
    for (int64_t g = g0; !seen[g]; g = (g % P) * (K / P) + g / P) {
      seen[g] = 1;
      cycle.push_back((int32_t)g);
    }
    if (cycle.size() < 2) continue;
    out.push_back((int32_t)cycle.size());
    out.insert(out.end(), cycle.begin(), cycle.end());
  }
  return out;
}

cudaError_t permute_row_tiles(void* a, int elem_bytes, int64_t cols, int64_t ld, int64_t tile, const int32_t* cycles,
                              int64_t cycles_len, cudaStream_t stream) {
  if (cols <= 0 || cycles_len <= 0) return cudaSuccess;
  dim3 grid((unsigned)cols, (unsigned)std::max<int64_t>(1, std::min<int64_t>((tile + 255) / 256, 64)));
  switch (elem_bytes) {
    case 4:
      permute_row_tiles_kernel<uint32_t><<<grid, 256, 0, stream>>>((uint32_t*)a, ld, tile, cycles, cycles_len);
      break;
    case 8:
      permute_row_tiles_kernel<uint64_t><<<grid, 256, 0, stream>>>((uint64_t*)a, ld, tile, cycles, cycles_len);
      break;
    case 16:
      permute_row_tiles_kernel<Elem16><<<grid, 256, 0, stream>>>((Elem16*)a, ld, tile, cycles, cycles_len);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t reorder_col_tiles(void* a, int elem_bytes, int64_t rows, int64_t cols, int64_t ld, int64_t tile, int64_t P,
                              void* scratch, int64_t scratch_elems, cudaStream_t stream) {
  switch (elem_bytes) {
    case 4:
      return reorder_cols_impl((uint32_t*)a, rows, cols, ld, tile, P, (uint32_t*)scratch, scratch_elems, stream);
    case 8:
      return reorder_cols_impl((uint64_t*)a, rows, cols, ld, tile, P, (uint64_t*)scratch, scratch_elems, stream);
    case 16:
      return reorder_cols_impl((Elem16*)a, rows, cols, ld, tile, P, (Elem16*)scratch, scratch_elems, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t local_logdet(const void* a, DType dtype, int64_t ld, int64_t n_global, int64_t tile, int64_t Pr, int64_t Pc,
                         int64_t p, int64_t q, void* out, cudaStream_t stream) {
  with_elem_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    using R = typename RealOf<T>::type;
    logdet_kernel<T, R><<<1, 1024, 0, stream>>>((const T*)a, ld, n_global, tile, Pr, Pc, p, q, (R*)out);
  });
  return cudaGetLastError();
}

namespace {
template <typename E>
__global__ void move_strict_lower_kernel(E* src, int64_t ld_src, int64_t rows, int64_t cols, E* dst, int64_t ld_dst,
                                         bool zero_source) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = i / rows, r = i % rows;
    if (r <= c) continue;
    dst[r + c * ld_dst] = src[r + c * ld_src];
    if (zero_source) src[r + c * ld_src] = E{};
  }
}

template <typename E>
__global__ void scatter_columns_kernel(const E* __restrict__ src, int64_t ld_src, int64_t rows, int64_t n,
                                       const int32_t* __restrict__ perm, E* __restrict__ dst, int64_t ld_dst) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = i / rows, r = i % rows;
    dst[r + (int64_t)perm[k] * ld_dst] = src[r + k * ld_src];
  }
}

template <typename F>
cudaError_t with_elem_bytes(int elem_bytes, F&& run) {
  switch (elem_bytes) {
    case 4:
      run(uint32_t{});
      break;
    case 8:
      run(uint64_t{});
      break;
    case 16:
      run(Elem16{});
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
}  // namespace

cudaError_t move_strict_lower(void* src, int64_t ld_src, int64_t rows, int64_t cols, void* dst, int64_t ld_dst,
                              bool zero_source, int elem_bytes, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return with_elem_bytes(elem_bytes, [&](auto zero) {
    using E = decltype(zero);
    move_strict_lower_kernel<E>
        <<<blocks_for(rows * cols), 256, 0, stream>>>((E*)src, ld_src, rows, cols, (E*)dst, ld_dst, zero_source);
  });
}

cudaError_t scatter_columns(const void* src, int64_t ld_src, int64_t rows, int64_t n, const int32_t* perm, void* dst,
                            int64_t ld_dst, int elem_bytes, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  return with_elem_bytes(elem_bytes, [&](auto zero) {
    using E = decltype(zero);
    scatter_columns_kernel<E>
        <<<blocks_for(rows * n), 256, 0, stream>>>((const E*)src, ld_src, rows, n, perm, (E*)dst, ld_dst);
  });
}

cudaError_t fill_int32(int32_t* dst, int64_t count, int32_t value, cudaStream_t stream) {
  fill_kernel<<<blocks_for(count), 256, 0, stream>>>(dst, count, value);
  return cudaGetLastError();
}

namespace {
template <typename From, typename To>
__global__ void convert_kernel(const From* src, To* dst, int64_t count) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = (To)src[i];
}
}  // namespace

cudaError_t pivots_to_int32(const int64_t* src, int32_t* dst, int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  convert_kernel<<<blocks_for(count), 256, 0, stream>>>(src, dst, count);
  return cudaGetLastError();
}

cudaError_t pivots_to_int64(const int32_t* src, int64_t* dst, int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  convert_kernel<<<blocks_for(count), 256, 0, stream>>>(src, dst, count);
  return cudaGetLastError();
}

}  // namespace jaxmg

namespace jaxmg {
namespace {

// The tile-wise kernels below move 32 x 32 tiles of column-major matrices through shared memory
// with a 32 x 8 thread block, reading and writing along columns: thread (tx, ty) handles rows
// tx, columns ty + k (k = 0, 8, 16, 24) of a tile.

// The 32 x 32 tile of `a` at rows r0, columns c0, into `buf` (buf[c][r] = a(r0 + r, c0 + c)), the
// elements outside the n x n matrix left as they are.
template <typename E>
__device__ void load_tile(E (&buf)[32][33], const E* a, int64_t n, int64_t ld, int64_t r0, int64_t c0) {
  for (int k = 0; k < 32; k += 8) {
    const int64_t r = r0 + threadIdx.x, c = c0 + threadIdx.y + k;
    if (r < n && c < n) buf[threadIdx.y + k][threadIdx.x] = a[r + c * ld];
  }
}

// The transpose of a tile loaded by load_tile, into `a` at rows r0, columns c0 (a(r0 + r, c0 + c)
// = buf[r][c]), inside the n x n matrix.
template <typename E>
__device__ void store_transposed(const E (&buf)[32][33], E* a, int64_t n, int64_t ld, int64_t r0, int64_t c0) {
  for (int k = 0; k < 32; k += 8) {
    const int64_t r = r0 + threadIdx.x, c = c0 + threadIdx.y + k;
    if (r < n && c < n) a[r + c * ld] = buf[threadIdx.x][threadIdx.y + k];
  }
}

template <typename E, bool TC>
__global__ void copy_tiles_kernel(const E* __restrict__ src, int64_t sld, E* __restrict__ dst, int64_t dld,
                                  const int64_t* __restrict__ offs, int64_t ntiles, int64_t T) {
  __shared__ E buf[32][33];
  const int nsub = (int)((T + 31) / 32);
  const int bi = blockIdx.x % nsub, bj = blockIdx.x / nsub;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t t = blockIdx.y; t < ntiles; t += gridDim.y) {
    const E* s = src + offs[2 * t];
    E* d = dst + offs[2 * t + 1];
    load_tile(buf, s, T, sld, bi * 32, bj * 32);
    __syncthreads();
    for (int k = 0; k < 32; k += 8) {
      if (TC) {
        int64_t r = bj * 32 + tx, c = bi * 32 + ty + k;  // dest (r, c) = conj(src(c, r))
        if (r < T && c < T) d[r + c * dld] = scalar::cj(buf[tx][ty + k]);
      } else {
        int64_t r = bi * 32 + tx, c = bj * 32 + ty + k;
        if (r < T && c < T) d[r + c * dld] = buf[ty + k][tx];
      }
    }
    __syncthreads();
  }
}

template <typename E>
__global__ void sym_diag_kernel(E* a, int64_t ld, const int64_t* __restrict__ offs, int64_t ntiles, int64_t T) {
  for (int64_t t = blockIdx.y; t < ntiles; t += gridDim.y) {
    E* d = a + offs[2 * t];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < T * T; i += (int64_t)gridDim.x * blockDim.x) {
      int64_t r = i % T, c = i / T;
      if (r > c) d[r + c * ld] = scalar::cj(d[c + r * ld]);
    }
  }
}

// The frame of the kernels on pairs of tiles of square matrices (a TilePairs launch): block (x, y)
// stands for the 32 x 32 tiles at (rows 32x, columns 32y) and (rows 32y, columns 32x); those with
// x >= y (lower) or x <= y run pair(a, 32x, 32y) on each of the `batch` matrices `stride` elements
// apart (the batch over the grid's z), the block synchronized after each.
template <typename E, typename Pair>
__device__ void for_tile_pairs(E* base, int64_t batch, int64_t stride, bool lower, Pair&& pair) {
  const int64_t bi = blockIdx.x, bj = blockIdx.y;
  if (lower ? bi < bj : bi > bj) return;
  for (int64_t m = blockIdx.z; m < batch; m += gridDim.z) {
    pair(base + m * stride, bi * 32, bj * 32);
    __syncthreads();
  }
}

// Column-major, in place, for each of `batch` matrices `stride` elements apart: every element
// strictly below the diagonal (to_lower) or strictly above it becomes its mirror in the other
// triangle (conjugated where conj: a Hermitian matrix from one triangle), and the mirror becomes
// zero where zero (the triangle moved, not copied). Block (x, y) writes the 32 x 32 tile at rows
// 32x, columns 32y (x >= y for to_lower, x <= y otherwise) from the tile at rows 32y, columns 32x,
// through shared memory, so that both are read and written along columns; no block writes a tile
// that another reads.
template <typename E>
__global__ void reflect_kernel(E* base, int64_t n, int64_t ld, int64_t batch, int64_t stride, bool to_lower, bool conj,
                               bool zero) {
  __shared__ E buf[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for_tile_pairs(base, batch, stride, to_lower, [&](E* a, int64_t i0, int64_t j0) {
    load_tile(buf, a, n, ld, j0, i0);
    __syncthreads();
    for (int k = 0; k < 32; k += 8) {
      int64_t r = i0 + tx, c = j0 + ty + k;  // (r, c) = op((c, r))
      if (r < n && c < n && (to_lower ? r > c : r < c))
        a[r + c * ld] = conj ? scalar::cj(buf[tx][ty + k]) : buf[tx][ty + k];
      if (zero) {
        int64_t sr = j0 + tx, sc = i0 + ty + k;  // the source tile's own elements, read above
        if (sr < n && sc < n && (to_lower ? sr < sc : sr > sc)) a[sr + sc * ld] = E{};
      }
    }
  });
}

// Column-major, in place, for each of `batch` matrices `stride` elements apart: a becomes a^T.
// Block (x, y), x >= y, swaps the 32 x 32 tiles at (rows 32x, columns 32y) and (rows 32y, columns
// 32x), both read through shared memory before either is written.
template <typename E>
__global__ void transpose_kernel(E* base, int64_t n, int64_t ld, int64_t batch, int64_t stride) {
  __shared__ E low[32][33], up[32][33];
  for_tile_pairs(base, batch, stride, /*lower=*/true, [&](E* a, int64_t i0, int64_t j0) {
    load_tile(low, a, n, ld, i0, j0);
    load_tile(up, a, n, ld, j0, i0);
    __syncthreads();
    store_transposed(up, a, n, ld, i0, j0);  // (r, c) = old (c, r), from the other tile
    store_transposed(low, a, n, ld, j0, i0);
  });
}

// The launch shape of the kernels above: one block per pair of 32 x 32 tiles, the batch on z.
struct TilePairs {
  dim3 grid, block;
  explicit TilePairs(int64_t n, int64_t batch)
      : grid((unsigned)((n + 31) / 32), (unsigned)((n + 31) / 32), (unsigned)std::min<int64_t>(batch, 65535)),
        block(32, 8) {}
};

template <typename E>
cudaError_t copy_tiles_impl(const void* src, int64_t sld, void* dst, int64_t dld, const int64_t* offs, int64_t ntiles,
                            int64_t T, bool tc, cudaStream_t stream) {
  if (ntiles <= 0) return cudaSuccess;
  int nsub = (int)((T + 31) / 32);
  dim3 grid(nsub * nsub, (unsigned)std::min<int64_t>(ntiles, 65535));
  dim3 block(32, 8);
  if (tc)
    copy_tiles_kernel<E, true><<<grid, block, 0, stream>>>((const E*)src, sld, (E*)dst, dld, offs, ntiles, T);
  else
    copy_tiles_kernel<E, false><<<grid, block, 0, stream>>>((const E*)src, sld, (E*)dst, dld, offs, ntiles, T);
  return cudaGetLastError();
}

}  // namespace

cudaError_t copy_tiles(const void* src_base, int64_t src_ld, void* dst_base, int64_t dst_ld, const int64_t* offs,
                       int64_t ntiles, int64_t tile, DType dtype, bool trans_conj, cudaStream_t stream) {
  return with_elem_type(dtype, [&](auto zero) {
    return copy_tiles_impl<decltype(zero)>(src_base, src_ld, dst_base, dst_ld, offs, ntiles, tile, trans_conj, stream);
  });
}

cudaError_t symmetrize_diag_tiles(void* a, int64_t ld, const int64_t* offs, int64_t ntiles, int64_t tile, DType dtype,
                                  cudaStream_t stream) {
  if (ntiles <= 0) return cudaSuccess;
  dim3 grid((unsigned)std::min<int64_t>((tile * tile + 255) / 256, 4096), (unsigned)std::min<int64_t>(ntiles, 65535));
  with_elem_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    sym_diag_kernel<T><<<grid, 256, 0, stream>>>((T*)a, ld, offs, ntiles, tile);
  });
  return cudaGetLastError();
}

cudaError_t reflect(void* a, int64_t n, int64_t ld, int64_t batch, int64_t stride, bool to_lower, bool conjugate,
                    bool zero_source, DType dtype, cudaStream_t stream) {
  if (n <= 0 || batch <= 0) return cudaSuccess;
  const TilePairs shape(n, batch);
  with_elem_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    reflect_kernel<T>
        <<<shape.grid, shape.block, 0, stream>>>((T*)a, n, ld, batch, stride, to_lower, conjugate, zero_source);
  });
  return cudaGetLastError();
}

cudaError_t mirror(void* a, int64_t n, int64_t ld, bool to_lower, DType dtype, cudaStream_t stream) {
  return reflect(a, n, ld, 1, 0, to_lower, true, false, dtype, stream);
}

cudaError_t transpose_square(void* a, int64_t n, int64_t ld, int64_t batch, int64_t stride, DType dtype,
                             cudaStream_t stream) {
  if (n <= 0 || batch <= 0) return cudaSuccess;
  const TilePairs shape(n, batch);
  with_elem_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    transpose_kernel<T><<<shape.grid, shape.block, 0, stream>>>((T*)a, n, ld, batch, stride);
  });
  return cudaGetLastError();
}

}  // namespace jaxmg
