// The shared core of the native library: failures and checks (also of the handlers' dtypes and
// extents), RAII wrappers, the grid cache (one Context per device and grid membership: NCCL
// communicator, cuSOLVERMp handle, grids, matrix descriptors, workspaces, and a slot for each
// family's own caches), the grid arguments every handler shares, the input copy of in-place
// handlers, the identity and NCCL-id handlers, and timings by call kind.
// Each family (cholesky.cc, lu.cc, qr.cc) builds its handlers on this file alone; adding a family does
// not change it.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtype.h"
#include "dynload.h"
#include "handlers.h"
#include "strcat.h"
#include "watchdog.h"
#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace jaxmg {

namespace ffi = xla::ffi;

// ---------------------------------------------------------------------------------------------
// Failures: every failure throws Failure with a message naming the call, the status and the rank;
// each handler's boundary turns it into an ffi::Error (a Python exception) with to_error.
// ---------------------------------------------------------------------------------------------
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "rank r of n (device d)" of the current call on this thread, set once known.
std::string& where();

// JAXMG_NATIVE_DEBUG=1 traces every step of a native call to stderr.
bool debug_enabled();

#define JAXMG_TRACE(...)                                                                          \
  do {                                                                                            \
    if (::jaxmg::debug_enabled()) {                                                               \
      std::string _m = ::jaxmg::cat("[jaxmg native ", ::jaxmg::where(), "] ", __VA_ARGS__, "\n"); \
      std::fputs(_m.c_str(), stderr);                                                             \
      std::fflush(stderr);                                                                        \
    }                                                                                             \
  } while (0)

[[noreturn]] void fail(const std::string& call, const std::string& status);
void check_cuda(cudaError_t e, const char* call);
void check_nccl(ncclResult_t r, const char* call);
void check_mp(cusolverStatus_t s, const char* call);
void check_blas(cublasStatus_t s, const char* call);
ffi::Error to_error(const std::exception& e);

// The one cuBLAS-handle policy of the library (gemm.cc's products, trsolve.cc's tiled solve),
// as JAX's handle pool: one handle per (device, stream), created on the stream's first use,
// bound to that stream once and kept for the process. A handle is never rebound to another
// stream, so work on two streams of one device (from one thread or several) never shares a
// handle's stream or workspace; cuBLAS calls on one unchanging handle are safe from any thread.
cublasHandle_t blas_handle(cudaStream_t stream);

// Whether a cuSOLVERMp status is a failed execution: cuSOLVERMp 0.8 reports a matrix that is
// not positive definite (or singular) this way. Such a call is a result (a status and NaN
// outputs, agreed over the grid), never an exception, so that every member takes the same path.
inline bool failed_execution(cusolverStatus_t st) {
  return st == CUSOLVER_STATUS_INTERNAL_ERROR || st == CUSOLVER_STATUS_EXECUTION_FAILED;
}

// The library's element type of an FFI buffer type (float32, float64, complex64, complex128), or
// none for any other.
std::optional<DType> dtype_of(ffi::DataType t);

// Checks a Dispatch makes before its implementation runs, each an InvalidArgument naming `who`:
// that `t` is one of the element types (*out: its DType);
ffi::Error check_dtype(const char* who, ffi::DataType t, DType* out);
// that `a` holds whole local matrices of mloc x nloc elements (*batch: how many, the leading
// batch dimension from vmap);
ffi::Error check_batch(const char* who, const ffi::AnyBuffer& a, int64_t mloc, int64_t nloc, int64_t* batch);
// that mloc x nloc is the local column-major extent of an m x n matrix on a pr x pc grid, in
// whole square tiles of `tile` (all of them positive).
ffi::Error check_extents(const char* who, int64_t m, int64_t n, int64_t tile, int64_t pr, int64_t pc, int64_t mloc,
                         int64_t nloc);

// How many matrices a one-GPU handler's operand of extents `dims` stacks: the product of its
// leading dimensions, those before its last `matrix_rank` (1 where there are none).
inline int64_t batch_of(ffi::Span<const int64_t> dims, size_t matrix_rank) {
  int64_t batch = 1;
  for (size_t k = 0; k + matrix_rank < dims.size(); ++k) batch *= dims[k];
  return batch;
}

// The prologue of an in-place handler (input_output_aliases): the output `out` starts as the
// input `in`, copied on `stream` where XLA did not alias the two buffers (a Failure where their
// sizes differ).
void copy_unless_aliased(ffi::AnyBuffer out, const ffi::AnyBuffer& in, cudaStream_t stream, const char* what);

// Synchronous read of `count` int32 words from device memory (on `stream`).
std::vector<int32_t> read_int32(const void* dptr, size_t count, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// RAII wrappers
// ---------------------------------------------------------------------------------------------
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  void reset();
  // At least `want` bytes (contents not kept when it grows).
  void ensure(size_t want, const char* what);
};

struct Event {
  cudaEvent_t ev = nullptr;
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  void create();
};

// ---------------------------------------------------------------------------------------------
// The grid cache
// ---------------------------------------------------------------------------------------------
// What a family keeps per context (plans, handles of its own): derive from it, and reach it with
// Context::family<T>(name).
struct FamilyCache {
  virtual ~FamilyCache() = default;
};

// Everything cached for one grid membership on one device. The cache and each call that uses it
// (GridCall, Watch) share its ownership: it is destroyed once the cache has dropped it and no call
// or watched GPU work holds it.
struct Context : Watched {  // device, rank, communicator and abort state (watchdog.h)
  cusolverMpHandle_t handle = nullptr;
  std::map<std::tuple<int, int, bool>, cusolverMpGrid_t> grids;  // (pr, pc, row-major mapping)
  std::map<std::string, cusolverMpMatrixDescriptor_t> descs;
  std::map<std::string, std::unique_ptr<FamilyCache>> families;
  DeviceBuffer work, scratch, info;  // cuSOLVERMp's device workspace, layout scratch, status words
  std::vector<char> host_work;       // cuSOLVERMp's host workspace
  std::mutex calls;                  // held by the call that uses the context (GridCall::busy): one at a time
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  // The pr x pc cuSOLVERMp grid, created once: column-major rank mapping (rank = p + q * pr), or
  // row-major (rank = p * pc + q) where `row_major` (the eigensolvers, csrc/eig.cc).
  cusolverMpGrid_t grid(int pr, int pc, bool row_major = false);
  // cuSOLVERMp's device workspace (`work`) of at least `device_bytes`, grown with cudaMalloc
  // outside XLA's pool and kept for later calls (a call holds the context's lock), the host
  // workspace of at least `host_bytes`, and the status words.
  void ensure_workspace(size_t device_bytes, size_t host_bytes);
  // The descriptor of an m x n matrix in mb x nb tiles on the pr x pc grid (local leading
  // dimension lld), created once per key.
  cusolverMpMatrixDescriptor_t matrix_desc(int pr, int pc, cudaDataType dtype, int64_t m, int64_t n, int64_t mb,
                                           int64_t nb, int64_t lld, bool row_major = false);
  // A family's cache of type T (default-constructed the first time).
  template <typename T>
  T& family(const std::string& name) {
    auto& slot = families[name];
    if (!slot) slot = std::make_unique<T>();
    return static_cast<T&>(*slot);
  }
};

// The matrix a family handler works on, from its attributes (layout_attrs): the global m x n
// matrix (m = n but for QR; padded) in square tiles of `tile` on the pr x pc cuSOLVERMp grid, and
// this member's column-major local block mloc x nloc; from the operand's buffer, the batch and the
// element type. Each family's Problem is one (with the family's own attributes).
struct GridMatrix {
  int64_t m, n, tile, pr, pc, mloc, nloc;
  int64_t batch = 1;         // leading batch (vmap) dimension, from the buffer
  DType dtype = DType::F64;  // the buffer's

  // The checks every Dispatch makes of its matrix operand `a` before its implementation
  // (check_dtype, check_batch, check_extents), each an InvalidArgument naming `who`; sets dtype and
  // batch.
  ffi::Error check(const char* who, const ffi::AnyBuffer& a);
  // The bytes of one batch entry's local block.
  int64_t entry_bytes() const { return mloc * nloc * elem_bytes(dtype); }
  // The matrix's descriptor (column-major rank mapping, or row-major where `row_major`).
  cusolverMpMatrixDescriptor_t desc(Context& ctx, bool row_major = false) const {
    return ctx.matrix_desc((int)pr, (int)pc, cuda_type(dtype), m, n, tile, tile, mloc, row_major);
  }
};

// The grid arguments every handler takes first (after the stream): the grid's members (device
// identities in rank order), the NCCL unique id (32 int32 words, summed over the grid), and this
// member's rank. Bind them with grid_bind().
using Members = ffi::Buffer<ffi::S32>;
using NcclId = ffi::Buffer<ffi::S32>;
using Rank = ffi::Buffer<ffi::S32>;

// ffi::Ffi::Bind() with the stream and the three grid arguments, in this order.
inline auto grid_bind() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<Members>()  // members: device identities (process_index * 1024 + ordinal) in rank order
      .Arg<NcclId>()   // the grid's ncclUniqueId as 32 int32 words
      .Arg<Rank>();    // this member's rank (column-major over the cuSOLVERMp grid)
}

// The layout attributes every family's handlers take after their operands and results: the
// global order n (padded), the square tile T_A, the cuSOLVERMp grid shape pr x pc, and the
// local column-major extents mloc x nloc. Families add their own attributes after these.
template <typename B>
auto layout_attrs(B&& bind) {
  return std::forward<B>(bind)
      .template Attr<int64_t>("n")      // global order, or columns of a tall matrix (padded)
      .template Attr<int64_t>("tile")   // T_A: square tiles
      .template Attr<int64_t>("pr")     // cuSOLVERMp grid rows
      .template Attr<int64_t>("pc")     // cuSOLVERMp grid columns
      .template Attr<int64_t>("mloc")   // local column-major extent: rows
      .template Attr<int64_t>("nloc");  // and columns
}

// One handler call on its grid: the device, this member's rank and coordinates, the cached
// context (communicator created on first use), with the handle bound to the call's stream.
// Members are released in reverse order: the watch, then the context's lock, then the reference.
struct GridCall {
  cudaStream_t stream = nullptr;
  int device = -1;
  int rank = 0;
  int64_t pr = 1, pc = 1, p = 0, q = 0;  // grid shape and this member's coordinates
  std::shared_ptr<Context> ctx;          // held for the call: clear_cache() never destroys it under it
  std::unique_lock<std::mutex> busy;     // ctx->calls: one call at a time uses a context
  std::unique_ptr<Watch> watch;          // the communicator is watched while this call's work runs
};
// The call's grid: its cached context (created on first use), held and locked for the call, the
// handle bound to `stream`, and a watch on the communicator (watchdog.h). Fails where the
// communicator was aborted.
GridCall open_grid(cudaStream_t stream, const Members& members, const NcclId& id, const Rank& rank, int64_t pr,
                   int64_t pc);

// A one-GPU handler's cuSOLVERMp work (band.cc's stedc) on the calling GPU's own one-rank grid:
// the context of the one-member grid of this device (the same one a 1 x 1 grid of this device
// uses: a one-rank NCCL communicator whose id this process makes, no grid arguments), held,
// locked, watched and bound to `stream` as open_grid's.
GridCall open_local(cudaStream_t stream);

// A family handler's work once its checks have passed: the call's grid (open_grid), then
// `work(g)`; a Failure (or any other exception) becomes the handler's error (to_error).
template <typename Work>
ffi::Error on_grid(cudaStream_t stream, const Members& members, const NcclId& id, const Rank& rank, int64_t pr,
                   int64_t pc, Work&& work) {
  try {
    GridCall g = open_grid(stream, members, id, rank, pr, pc);
    work(g);
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// A one-GPU handler's work once its checks have passed: the calling GPU's one-rank grid
// (open_local), then `work(g)`; failures as on_grid's.
template <typename Work>
ffi::Error on_local(cudaStream_t stream, Work&& work) {
  try {
    GridCall g = open_local(stream);
    work(g);
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// The status of one cuSOLVERMp call `call` that returned `st` and wrote its info to `status`:
// a failure other than a failed execution throws (check_mp); otherwise the info, or -1 where the
// call failed without one, written back to `status` (on this member only: not agreed).
int32_t entry_status(GridCall& g, cusolverStatus_t st, int32_t* status, const char* call);

// Agree on a status over the grid: the maximum of every member's `status` (device int32),
// written back to `status`; returns it (synchronizes).
int32_t agree_status(GridCall& g, int32_t* status);

// Writes `v` to the device status word `status` on the call's stream (a kernel, so it is
// ordered before agree_status reads it; no host memory or default-stream copy is involved).
void set_status(GridCall& g, int32_t* status, int32_t v);

// The status of an entry whose cuSOLVERMp call was a failed execution: its info where that is
// positive (read on the call's stream), else `fallback`, written to `status`; returns it.
int32_t failure_status(GridCall& g, int32_t* status, int32_t fallback);

// One output of a batch entry: `bytes` bytes at `ptr` (device memory).
struct EntryOutput {
  void* ptr;
  size_t bytes;
};

// The outputs of an entry whose status is `status` (0: it succeeded): where it failed, every byte
// of each of `outputs` is set on the call's stream (0xFF: a NaN in every floating type), so that
// whatever reads them (solves, log dets, products) gives NaN rather than a partial result's
// numbers. Returns whether it failed.
bool fill_failed(GridCall& g, int32_t status, std::initializer_list<EntryOutput> outputs);

// ---------------------------------------------------------------------------------------------
// Timings by call kind: GPU events around the layout step, the first factorization and the whole
// cuSOLVERMp part of each call.
// ---------------------------------------------------------------------------------------------
struct TimedCall {
  std::string kind;       // "potrf", "potrs", "getrf", "getrs", ...
  Event t0, t1, tf, t2;   // start, after the layout step, after the first factorization, end
  bool factored = false;  // tf recorded (a factor call)
  explicit TimedCall(std::string k);
  void start(cudaStream_t s) { check_cuda(cudaEventRecord(t0.ev, s), "cudaEventRecord"); }
  void laid_out(cudaStream_t s) { check_cuda(cudaEventRecord(t1.ev, s), "cudaEventRecord"); }
  void factor_done(cudaStream_t s) {
    check_cuda(cudaEventRecord(tf.ev, s), "cudaEventRecord");
    factored = true;
  }
};
// Records the end of `call` on `stream` and keeps it for last_timings().
void record_timing(int device, std::unique_ptr<TimedCall> call, cudaStream_t stream);

// A cuSOLVERMp call over every batch entry, timed as `kind`: the call's workspaces of at least
// dwork / hwork bytes (and its status words), then `entry(k)` for k = 0 .. batch - 1. There is no
// layout step (the kernel layer lays the matrix out); where `factors`, the end of the first entry
// is the end of the first factorization.
template <typename Entry>
void timed_batch(GridCall& g, const char* kind, int64_t batch, size_t dwork, size_t hwork, bool factors,
                 Entry&& entry) {
  g.ctx->ensure_workspace(dwork, hwork);
  auto timed = std::make_unique<TimedCall>(kind);
  timed->start(g.stream);
  timed->laid_out(g.stream);
  for (int64_t k = 0; k < batch; ++k) {
    entry(k);
    if (factors && k == 0) timed->factor_done(g.stream);
  }
  record_timing(g.device, std::move(timed), g.stream);
}

}  // namespace jaxmg
