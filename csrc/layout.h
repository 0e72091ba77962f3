// Device-side layout helpers: local tile reorders (with bounded scratch), the local part of
// log det from a factor's diagonal, and tiny fills. All asynchronous on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "dtype.h"

namespace jaxmg {

// The tile permutation that turns a block layout over P processes into a block-cyclic one:
// block-cyclic tile g holds block-layout tile sigma(g) = (g % P) * (K / P) + g / P  (K tiles, P | K).

// The cycles of sigma (K tiles, P processes) of length 2 or more, for permute_row_tiles: each as
// [length, g0, g1, ..., g(length-1)] with g(i+1) = sigma(g(i)), concatenated (host side).
std::vector<int32_t> sigma_cycles(int64_t K, int64_t P);

// In place, in one pass (each element read and written once): a column-major (K*tile x cols,
// leading dimension ld) matrix gets its row tiles reordered, new row tile g = old row tile
// sigma(g), following `cycles` (sigma_cycles, on the device, cycles_len entries).
cudaError_t permute_row_tiles(void* a, int elem_bytes, int64_t cols, int64_t ld, int64_t tile, const int32_t* cycles,
                              int64_t cycles_len, cudaStream_t stream);

// In place: new column tile g = old column tile sigma(g), rows processed in batches through scratch.
cudaError_t reorder_col_tiles(void* a, int elem_bytes, int64_t rows, int64_t cols, int64_t ld, int64_t tile, int64_t P,
                              void* scratch, int64_t scratch_elems, cudaStream_t stream);

// out[0] = sum of log(real(diag)) over the global diagonal entries this process owns in a
// block-cyclic (tile x tile, Pr x Pc grid, this process at (p, q)) column-major local matrix.
// out is of a's real type (float for F32 and C64, double for F64 and C128).
cudaError_t local_logdet(const void* a, DType dtype, int64_t ld, int64_t n_global, int64_t tile, int64_t Pr, int64_t Pc,
                         int64_t p, int64_t q, void* out, cudaStream_t stream);

// dst[0..count) = value (int32), on the stream.
cudaError_t fill_int32(int32_t* dst, int64_t count, int32_t value, cudaStream_t stream);

// LU pivots between cuSOLVERMp's int64 and the int32 that JAX arrays hold (XLA without x64).
cudaError_t pivots_to_int32(const int64_t* src, int32_t* dst, int64_t count, cudaStream_t stream);
cudaError_t pivots_to_int64(const int32_t* src, int64_t* dst, int64_t count, cudaStream_t stream);

}  // namespace jaxmg

namespace jaxmg {

// Copies ntiles tile x tile tiles; tile t goes from src_base + offs[2t] (leading dimension src_ld)
// to dst_base + offs[2t+1] (leading dimension dst_ld), conjugate-transposed when trans_conj.
cudaError_t copy_tiles(const void* src_base, int64_t src_ld, void* dst_base, int64_t dst_ld, const int64_t* offs,
                       int64_t ntiles, int64_t tile, DType dtype, bool trans_conj, cudaStream_t stream);

// For each tile at a + offs[2t] (leading dimension ld): its strictly lower part becomes the
// conjugate transpose of its strictly upper part.
cudaError_t symmetrize_diag_tiles(void* a, int64_t ld, const int64_t* offs, int64_t ntiles, int64_t tile, DType dtype,
                                  cudaStream_t stream);

// Column-major n x n matrices (leading dimension ld), `batch` of them `stride` elements apart, in
// place: the strictly lower triangle becomes the transpose of the strictly upper one (to_lower),
// or the reverse; conjugated where `conjugate`; the triangle read becomes zero where
// `zero_source` (the triangle moved into the other).
cudaError_t reflect(void* a, int64_t n, int64_t ld, int64_t batch, int64_t stride, bool to_lower, bool conjugate,
                    bool zero_source, DType dtype, cudaStream_t stream);

// reflect of one matrix, conjugated: a Hermitian matrix from its strictly upper triangle
// (to_lower) or from its strictly lower one.
cudaError_t mirror(void* a, int64_t n, int64_t ld, bool to_lower, DType dtype, cudaStream_t stream);

// Column-major n x n matrices, `batch` of them `stride` elements apart, in place: each becomes its
// transpose (no conjugation).
cudaError_t transpose_square(void* a, int64_t n, int64_t ld, int64_t batch, int64_t stride, DType dtype,
                             cudaStream_t stream);

// Column-major, elements of elem_bytes (4, 8 or 16): for every column c < cols and row r with
// c < r < rows, dst[r + c ld_dst] = src[r + c ld_src], and src's element becomes zero where
// zero_source (the part of a panel strictly below its diagonal, moved out).
cudaError_t move_strict_lower(void* src, int64_t ld_src, int64_t rows, int64_t cols, void* dst, int64_t ld_dst,
                              bool zero_source, int elem_bytes, cudaStream_t stream);

// Column-major, elements of elem_bytes: dst[i + perm[k] ld_dst] = src[i + k ld_src] for
// i < rows, k < n (the columns of a block of rows, each put where perm says).
cudaError_t scatter_columns(const void* src, int64_t ld_src, int64_t rows, int64_t n, const int32_t* perm, void* dst,
                            int64_t ld_dst, int elem_bytes, cudaStream_t stream);

}  // namespace jaxmg
