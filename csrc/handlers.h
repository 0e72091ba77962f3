// What the nanobind module (module.cc) exports: every FFI handler of the library, and the
// process index, timings and cache information of the grid cache (grid.cc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace jaxmg {

// Handlers (of XLA's handler type, XLA_FFI_Handler: XLA_FFI_Error* (XLA_FFI_CallFrame*)), defined
// with XLA_FFI_DEFINE_HANDLER_SYMBOL in the files named below and registered from Python with
// jax.ffi.register_ffi_target.
extern "C" {
// The core (grid.cc): this device's identity; a fresh ncclUniqueId on the grid's first member.
XLA_FFI_Handler jaxmg_identity, jaxmg_nccl_id;
// The Cholesky family (cholesky.cc): potrf (and optionally potrs) in place; potrs and the local
// log det with a saved factor.
XLA_FFI_Handler jaxmg_potrf, jaxmg_potrs;
// The LU family (lu.cc): getrf in place (factor, pivots, status); getrs (op = N) with a saved factor.
XLA_FFI_Handler jaxmg_getrf, jaxmg_getrs;
// The QR family (qr.cc): geqrf in place (Householder factor, tau, status); orgqr (the explicit Q
// from a saved factor).
XLA_FFI_Handler jaxmg_geqrf, jaxmg_orgqr;
// The eigensolver family (eig.cc): syevd and sygvd (type 1, vectors) on a row-major-mapped grid.
XLA_FFI_Handler jaxmg_syevd, jaxmg_sygvd;
// Matrix products on the calling GPU through cuBLAS (gemm.cc), for the triangular inverses:
// general (gemm) and triangular (trmm); and the Hermitian inverse from a Cholesky factor on the
// calling GPU: LAPACK's potri as a recursion of cuBLAS calls, in place.
XLA_FFI_Handler jaxmg_gemm, jaxmg_trmm, jaxmg_potri, jaxmg_getri;
// A square matrix rearranged in its own buffer on the calling GPU (relayout.cc): transposed, or
// one triangle moved into the other, for the one-GPU factorisations.
XLA_FFI_Handler jaxmg_relayout;
// Stages 2 and 3 of the two-stage Hermitian eigensolver on the calling GPU (band.cc): band ->
// tridiagonal by bulge chasing (and its reflectors); the eigenvalues of a real tridiagonal by
// bisection; its eigenvalues and eigenvectors by cuSOLVERMp's divide and conquer.
XLA_FFI_Handler jaxmg_sb2st, jaxmg_tridiagonal_bisection, jaxmg_stedc;
}

void set_process_index(int index);
int process_index();

struct Timing {
  int device = -1;
  std::string kind;
  double layout_ms = 0;  // layout step before the factorization
  double solver_ms = 0;  // inside cuSOLVERMp (and the tiled solve)
  double factor_ms = 0;  // of which: the first factorization of each call (with the status agreement)
  int calls = 0;
  bool valid = false;
};
// Per device and call kind: GPU time summed over the native calls since the last reset_timings()
// (waits for them).
std::vector<Timing> last_timings();
void reset_timings();

struct CacheInfo {
  int communicators = 0;
  int descriptors = 0;
  size_t workspace_bytes = 0;
  int cusolvermp_version = -1;  // from the first handle, -1 before any
};
CacheInfo cache_info();
// The loaded cuSOLVERMp's version code (major * 1000 + minor * 100 + patch, as the header's
// CUSOLVERMP_VERSION), from the first handle made; -1 before any.
int cusolvermp_version();
// The same, reading it first where no handle was made yet: a handle is created on CUDA device
// `device` (the calling process's GPU), asked, and destroyed; -1 where the library is not loaded
// or the device cannot be used.
int probe_cusolvermp_version(int device);
// Drops the cache's reference to every cached context (communicator, handle, grids, descriptors,
// workspaces, family caches): each is destroyed at once, or, where a call or its GPU work holds it,
// when that ends. Collective-free; all processes should do the same (a grid is created again,
// collectively, on its next use).
void clear_cache();

}  // namespace jaxmg
