// Stages 2 and 3 of the two-stage Hermitian eigensolver on one GPU (band.cu): the band reduced
// to tridiagonal form by bulge chasing (with its reflectors where asked), and the eigenvalues of
// a real symmetric tridiagonal by bisection. All asynchronous on the given stream; the handlers
// are in band.cc (which also solves the tridiagonal eigenproblem with vectors through
// cuSOLVERMp's stedc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dtype.h"

namespace jaxmg {

// Device bytes of the scratch that sb2st needs for an n x n matrix of half-bandwidth b whose
// elements take elem_size bytes (jaxmg._native.sb2st_scratch_bytes, which the caller allocates).
int64_t sb2st_scratch_bytes(int64_t n, int64_t b, int64_t elem_size);

// The most tasks of one sweep of sb2st, K = (n - 3) / b + 1 (0 where n < 3 or b < 1): the
// reflectors' second extent.
int64_t sb2st_tasks(int64_t n, int64_t b);

// ab: lower band storage ((b + 1) x n, ab[d + j (b + 1)] = B(j + d, j)), read only. Writes the
// tridiagonal T = Q^H B Q: d (n reals), e (n - 1 elements of dtype, T(j + 1, j)). scratch:
// sb2st_scratch_bytes, 256-byte aligned. Where v and tau are not null, also Q's reflectors:
// v (S x K x b, S = max(n - 2, 0) sweeps, K = sb2st_tasks) and tau (S x K) of dtype, sweep i's
// task t acting on rows i + 1 + t b + k (v[i, t, 0] = 1, zero past row n - 1), zero for the
// tasks a sweep does not have; Q = prod over (i, t) in lexicographic order of (I - tau v v^H).
cudaError_t sb2st(const void* ab, int64_t n, int64_t b, DType dtype, void* d, void* e, void* v, void* tau,
                  void* scratch, cudaStream_t stream);

// de: 2 x n reals (d, then e with e[n - 1] ignored), w: the n eigenvalues ascending; real_bytes
// is 4 (float) or 8 (double).
cudaError_t tridiagonal_bisection(const void* de, int64_t n, int real_bytes, void* w, cudaStream_t stream);

}  // namespace jaxmg
