// The grid cache (NCCL communicator + cuSOLVERMp handle, grids, descriptors, workspaces) and the
// XLA FFI handlers that use it.
#pragma once

#include <string>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace jaxmg {

// Handlers (XLA_FFI_Handler*), registered from Python with jax.ffi.register_ffi_target.
extern "C" XLA_FFI_Error* jaxmg_identity(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* jaxmg_nccl_id(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* jaxmg_potrf(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* jaxmg_potrs(XLA_FFI_CallFrame* call_frame);

void set_process_index(int index);
int process_index();

struct Timing {
  int device = -1;
  double layout_ms = 0;   // local tile reorder before the factorization
  double solver_ms = 0;   // potrf / potrs inside cuSOLVERMp
  double factor_ms = 0;   // of which: the first potrf of each call (with the status agreement)
  int calls = 0;
  bool valid = false;
};
// Per device: GPU time summed over the native calls since the last reset_timings() (waits for them).
std::vector<Timing> last_timings();
void reset_timings();

struct CacheInfo {
  int communicators = 0;
  int descriptors = 0;
  size_t workspace_bytes = 0;
  int cusolvermp_version = -1;  // from the first handle, -1 before any
};
CacheInfo cache_info();
// Drops every cached communicator, handle, grid, descriptor and workspace (collective-free; use
// only when no call is in flight and all processes do the same).
void clear_cache();

}  // namespace jaxmg
