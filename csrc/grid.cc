#include "grid.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "codes.h"
#include "layout.h"

namespace jaxmg {
namespace {

std::atomic<int> g_process_index{0};
std::atomic<int> g_cusolvermp_version{-1};
constexpr size_t kMaxTimed = 256;  // timed calls kept per device since the last reset

struct DeviceState {
  std::vector<std::unique_ptr<TimedCall>> calls;  // since the last reset (at most kMaxTimed kept)
};

// Contexts are shared: a call (GridCall) and its watched GPU work (Watch) hold their context, so
// dropping the cache's reference (clear_cache) never destroys one in use. An entry, once
// inserted, is never replaced: each key's context is created by one thread at a time (its
// guard in `creating`), and inserted only where the key has none.
struct Cache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Context>> contexts;     // key: device + members
  std::map<std::string, std::shared_ptr<std::mutex>> creating;  // per key: held while one is created
  std::map<int, DeviceState> devices;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: NCCL teardown at exit can hang
  return *c;
}

const char* cusolver_status_name(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS:
      return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED:
      return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE:
      return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH:
      return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
      return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
      return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default:
      return "cusolverStatus";
  }
}

std::string members_key(int device, const std::vector<int32_t>& members) {
  std::string key = cat("dev", device, ":");
  for (int32_t m : members) key += cat(m, ",");
  return key;
}

int stream_device(cudaStream_t stream) {
  int dev = -1;
  check_cuda(cudaStreamGetDevice(stream, &dev), "cudaStreamGetDevice");
  check_cuda(cudaSetDevice(dev), "cudaSetDevice");
  return dev;
}

void check_one_gpu_per_process(const std::vector<int32_t>& members) {
  // Two members in one process would need one host thread per GPU inside one collective call.
  for (size_t i = 0; i < members.size(); ++i)
    for (size_t j = i + 1; j < members.size(); ++j)
      if (members[i] / codes::process_stride == members[j] / codes::process_stride && members[i] != members[j])
        throw Failure("jaxmg native: one process drives several GPUs of one grid (members " +
                      std::to_string(members[i]) + " and " + std::to_string(members[j]) +
                      "); launch one process per GPU with `python -m jaxmg.launch -n NGPUS script.py`");
}

// The identity of CUDA device `dev` of this process: process_index * codes::process_stride + dev.
int32_t identity_of(int dev) { return (int32_t)(g_process_index * codes::process_stride + dev); }

void set_where(int rank, size_t nranks, int dev) {
  where() = cat("rank ", rank, " of ", nranks, " (device ", dev, ")");
}

// The grid's communicator id, as the grid's first member made it (device words, summed over
// the grid by the caller).
ncclUniqueId grid_id(const void* id_dptr, cudaStream_t stream) {
  std::vector<int32_t> words = read_int32(id_dptr, 32, stream);
  ncclUniqueId id;
  std::memcpy(&id, words.data(), sizeof(id));
  bool all_zero = true;
  for (int32_t w : words) all_zero &= (w == 0);
  if (all_zero)
    throw Failure("jaxmg native: the grid's communicator id is empty on " + where() +
                  " (the first member found its communicator cached but this member did not; "
                  "were the processes' jaxmg calls out of step?)");
  return id;
}

// A new context for these members on `dev`: the communicator from the id `make_id()` gives
// (the grid's first member's: collective over the grid), and a cuSOLVERMp handle.
template <typename MakeId>
std::shared_ptr<Context> create_context(int dev, const std::vector<int32_t>& members, int rank, MakeId&& make_id,
                                        cudaStream_t stream) {
  check_one_gpu_per_process(members);
  JAXMG_TRACE("creating communicator of ", members.size(), " members");
  const ncclUniqueId id = make_id();
  auto ctx = std::make_shared<Context>();
  ctx->device = dev;
  ctx->nranks = (int)members.size();
  ctx->rank = rank;
  check_nccl(api().ncclCommInitRank(&ctx->comm, ctx->nranks, id, rank), "ncclCommInitRank");
  JAXMG_TRACE("ncclCommInitRank done");
  check_mp(api().cusolverMpCreate(&ctx->handle, dev, stream), "cusolverMpCreate");
  JAXMG_TRACE("cusolverMpCreate done");
  int v = -1;
  if (g_cusolvermp_version < 0 && api().cusolverMpGetVersion(ctx->handle, &v) == CUSOLVER_STATUS_SUCCESS)
    g_cusolvermp_version = v;
  return ctx;
}

// The cached context of `key` (c.mu held), or null.
std::shared_ptr<Context> cached(Cache& c, const std::string& key) {
  auto it = c.contexts.find(key);
  return it == c.contexts.end() ? nullptr : it->second;
}

// The cached context of these members on `dev`, created on first use (with the id `make_id()`
// gives): by one thread, under the key's guard, while any other thread that needs it waits and
// then takes the same one.
template <typename MakeId>
std::shared_ptr<Context> get_context(int dev, const std::vector<int32_t>& members, int rank, MakeId&& make_id,
                                     cudaStream_t stream) {
  Cache& c = cache();
  const std::string key = members_key(dev, members);
  std::shared_ptr<std::mutex> guard;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto ctx = cached(c, key)) return ctx;
    auto& g = c.creating[key];
    if (!g) g = std::make_shared<std::mutex>();
    guard = g;
  }
  std::lock_guard<std::mutex> creating(*guard);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto ctx = cached(c, key)) return ctx;  // created while this thread waited
  }
  std::shared_ptr<Context> made = create_context(dev, members, rank, make_id, stream);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.contexts.try_emplace(key, made).first->second;  // an existing entry is kept, never replaced
}

// ---------------------------------------------------------------------------------------------
// The core's handlers
// ---------------------------------------------------------------------------------------------

// This device's identity, process_index * codes::process_stride + CUDA ordinal.
ffi::Error IdentityImpl(cudaStream_t stream, ffi::Result<ffi::Buffer<ffi::S32>> out) {
  try {
    JAXMG_TRACE("identity handler");
    int dev = stream_device(stream);
    check_cuda(fill_int32(out->typed_data(), (int64_t)out->element_count(), identity_of(dev), stream), "fill identity");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// A new ncclUniqueId (as 32 int32 words) from the grid's first member when the communicator of
// these members is not cached yet; zeros otherwise (the caller sums over the grid).
ffi::Error NcclIdImpl(cudaStream_t stream, Members members_buf, Rank rank_buf, ffi::Result<ffi::Buffer<ffi::S32>> out) {
  try {
    JAXMG_TRACE("nccl id handler");
    require_loaded();
    int dev = stream_device(stream);
    size_t n = members_buf.dimensions().back();
    std::vector<int32_t> members = read_int32(members_buf.typed_data(), n, stream);
    int rank = read_int32(rank_buf.typed_data(), 1, stream)[0];
    set_where(rank, n, dev);
    static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId size");
    bool first = false;  // whether this member makes the grid's id: its communicator is not cached yet
    {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);  // only for the look-up: never across GPU work
      first = rank == 0 && !c.contexts.count(members_key(dev, members));
    }
    std::vector<int32_t> words(32, 0);  // host memory that outlives the copy (synchronized below)
    if (first) {
      ncclUniqueId id;
      check_nccl(api().ncclGetUniqueId(&id), "ncclGetUniqueId");
      std::memcpy(words.data(), &id, sizeof(id));
    }
    size_t count = std::min<size_t>(out->element_count(), 32);
    check_cuda(
        cudaMemcpyAsync(out->typed_data(), words.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(host to device)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Failures and checks
// ---------------------------------------------------------------------------------------------
std::string& where() {
  thread_local std::string w = "rank ?";
  return w;
}

bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("JAXMG_NATIVE_DEBUG");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

void fail(const std::string& call, const std::string& status) {
  throw Failure("jaxmg native: " + call + " failed with " + status + " on " + where());
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    fail(call, cat("CUDA error ", (int)e, " (", cudaGetErrorName(e), ": ", cudaGetErrorString(e), ")"));
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) {
    const char* s = api().ncclGetErrorString ? api().ncclGetErrorString(r) : "?";
    fail(call, cat("NCCL status ", (int)r, " (", s, ")"));
  }
}

void check_mp(cusolverStatus_t s, const char* call) {
  if (s != CUSOLVER_STATUS_SUCCESS) fail(call, cat("cuSOLVERMp status ", (int)s, " (", cusolver_status_name(s), ")"));
}

void check_blas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(call, cat("cuBLAS status ", (int)s));
}

ffi::Error to_error(const std::exception& e) {
  const std::string aborts = aborts_so_far();
  if (aborts.empty()) return ffi::Error::Internal(e.what());
  return ffi::Error::Internal(cat(e.what(), " [the watchdog aborted a communicator: ", aborts, "]"));
}

std::optional<DType> dtype_of(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return DType::F32;
    case ffi::DataType::F64:
      return DType::F64;
    case ffi::DataType::C64:
      return DType::C64;
    case ffi::DataType::C128:
      return DType::C128;
    default:
      return std::nullopt;
  }
}

ffi::Error check_dtype(const char* who, ffi::DataType t, DType* out) {
  const std::optional<DType> d = dtype_of(t);
  if (!d) return ffi::Error::InvalidArgument(cat(who, ": float32, float64, complex64 or complex128 only"));
  *out = *d;
  return ffi::Error::Success();
}

ffi::Error check_batch(const char* who, const ffi::AnyBuffer& a, int64_t mloc, int64_t nloc, int64_t* batch) {
  const int64_t mat = mloc * nloc;
  if (mloc <= 0 || nloc <= 0 || (int64_t)a.element_count() % mat)
    return ffi::Error::InvalidArgument(cat(who, ": the local matrix has ", a.element_count(),
                                           " elements, not a multiple of mloc * nloc = ", mloc, " * ", nloc));
  *batch = (int64_t)a.element_count() / mat;
  return ffi::Error::Success();
}

ffi::Error check_extents(const char* who, int64_t m, int64_t n, int64_t tile, int64_t pr, int64_t pc, int64_t mloc,
                         int64_t nloc) {
  if (tile <= 0 || pr <= 0 || pc <= 0 || mloc <= 0 || nloc <= 0 || mloc * pr != m || nloc * pc != n || mloc % tile ||
      nloc % tile)
    return ffi::Error::InvalidArgument(cat(who, ": local extents ", mloc, "x", nloc, " are not ", m, "x", n, " / grid ",
                                           pr, "x", pc, " in whole tiles of ", tile));
  return ffi::Error::Success();
}

ffi::Error GridMatrix::check(const char* who, const ffi::AnyBuffer& a) {
  if (ffi::Error e = check_dtype(who, a.element_type(), &dtype); e.failure()) return e;
  if (ffi::Error e = check_batch(who, a, mloc, nloc, &batch); e.failure()) return e;
  return check_extents(who, m, n, tile, pr, pc, mloc, nloc);
}

void copy_unless_aliased(ffi::AnyBuffer out, const ffi::AnyBuffer& in, cudaStream_t stream, const char* what) {
  if (out.untyped_data() == in.untyped_data()) return;
  if (out.size_bytes() != in.size_bytes())
    throw Failure(
        cat("jaxmg native: ", what, ": the output has ", out.size_bytes(), " bytes, the input ", in.size_bytes()));
  check_cuda(cudaMemcpyAsync(out.untyped_data(), in.untyped_data(), in.size_bytes(), cudaMemcpyDeviceToDevice, stream),
             what);
}

std::vector<int32_t> read_int32(const void* dptr, size_t count, cudaStream_t stream) {
  std::vector<int32_t> host(count);
  check_cuda(cudaMemcpyAsync(host.data(), dptr, count * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync(device to host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host;
}

// ---------------------------------------------------------------------------------------------
// RAII wrappers and the context
// ---------------------------------------------------------------------------------------------
void DeviceBuffer::reset() {
  if (ptr) cudaFree(ptr);
  ptr = nullptr;
  bytes = 0;
}

void DeviceBuffer::ensure(size_t want, const char* what) {
  if (want <= bytes) return;
  reset();
  check_cuda(cudaMalloc(&ptr, want), what);
  bytes = want;
}

Event::~Event() {
  if (ev) cudaEventDestroy(ev);
}

void Event::create() {
  if (!ev) check_cuda(cudaEventCreate(&ev), "cudaEventCreate");
}

Context::~Context() {
  // The last holder may be any thread (clear_cache, a call, the watchdog): on the context's device.
  int previous = -1;
  const bool switched = device >= 0 && cudaGetDevice(&previous) == cudaSuccess && previous != device &&
                        cudaSetDevice(device) == cudaSuccess;
  families.clear();  // their cuBLAS handles and plans go before the communicator
  for (auto& [key, d] : descs) api().cusolverMpDestroyMatrixDesc(d);
  for (auto& [key, g] : grids) api().cusolverMpDestroyGrid(g);
  if (handle) api().cusolverMpDestroy(handle);
  if (comm && !comm_aborted) api().ncclCommDestroy(comm);
  if (switched) cudaSetDevice(previous);
}

cusolverMpGrid_t Context::grid(int pr, int pc, bool row_major) {
  auto& g = grids[{pr, pc, row_major}];
  if (!g)
    check_mp(api().cusolverMpCreateDeviceGrid(
                 handle, &g, comm, pr, pc,
                 row_major ? CUSOLVERMP_GRID_MAPPING_ROW_MAJOR : CUSOLVERMP_GRID_MAPPING_COL_MAJOR),
             "cusolverMpCreateDeviceGrid");
  return g;
}

cusolverMpMatrixDescriptor_t Context::matrix_desc(int pr, int pc, cudaDataType dtype, int64_t m, int64_t n, int64_t mb,
                                                  int64_t nb, int64_t lld, bool row_major) {
  const std::string key =
      cat(pr, "x", pc, row_major ? "r" : "", ":", (int)dtype, ":", m, "x", n, ":", mb, "x", nb, ":", lld);
  auto& d = descs[key];
  if (!d) {
    check_mp(api().cusolverMpCreateMatrixDesc(&d, grid(pr, pc, row_major), dtype, m, n, mb, nb, 0, 0, lld),
             "cusolverMpCreateMatrixDesc");
    JAXMG_TRACE("descriptor ", key, " created");
  }
  return d;
}

void Context::ensure_workspace(size_t device_bytes, size_t host_bytes) {
  work.ensure(std::max<size_t>(device_bytes, 256), "cudaMalloc(cuSOLVERMp workspace)");
  if (host_work.size() < std::max<size_t>(host_bytes, 1)) host_work.resize(std::max<size_t>(host_bytes, 1));
  info.ensure(sizeof(int32_t) * 4, "cudaMalloc(info)");
  JAXMG_TRACE("workspace device ", device_bytes, " host ", host_bytes);
}

namespace {

// The end of open_grid and open_local once g.ctx is known: the context's lock, the abort check,
// the watch and the handle's stream.
void hold_context(GridCall& g) {
  g.busy = std::unique_lock<std::mutex>(g.ctx->calls);
  if (g.ctx->comm_aborted)
    throw Failure("jaxmg native: this grid's NCCL communicator was aborted earlier (" + abort_reason(*g.ctx) +
                  "); it cannot be used again: restart the processes");
  g.watch = std::make_unique<Watch>(g.ctx, g.stream);
  check_mp(api().cusolverMpSetStream(g.ctx->handle, g.stream), "cusolverMpSetStream");
}

}  // namespace

GridCall open_grid(cudaStream_t stream, const Members& members_buf, const NcclId& id_buf, const Rank& rank_buf,
                   int64_t pr, int64_t pc) {
  require_loaded();
  GridCall g;
  g.stream = stream;
  g.device = stream_device(stream);
  const size_t nmembers = members_buf.dimensions().back();
  std::vector<int32_t> members = read_int32(members_buf.typed_data(), nmembers, stream);
  g.rank = read_int32(rank_buf.typed_data(), 1, stream)[0];
  set_where(g.rank, nmembers, g.device);
  if ((int64_t)nmembers != pr * pc) throw Failure("jaxmg native: grid size mismatch on " + where());
  g.pr = pr, g.pc = pc, g.p = g.rank % pr, g.q = g.rank / pr;
  g.ctx = get_context(g.device, members, g.rank, [&] { return grid_id(id_buf.typed_data(), stream); }, stream);
  hold_context(g);
  return g;
}

GridCall open_local(cudaStream_t stream) {
  require_loaded();
  GridCall g;
  g.stream = stream;
  g.device = stream_device(stream);
  set_where(0, 1, g.device);
  const std::vector<int32_t> members{identity_of(g.device)};
  g.ctx = get_context(
      g.device, members, 0,
      [] {
        ncclUniqueId id;
        check_nccl(api().ncclGetUniqueId(&id), "ncclGetUniqueId");
        return id;
      },
      stream);
  hold_context(g);
  return g;
}

int32_t agree_status(GridCall& g, int32_t* status) {
  Context& ctx = *g.ctx;
  ctx.info.ensure(sizeof(int32_t) * 4, "cudaMalloc(info)");
  int32_t* flag = static_cast<int32_t*>(ctx.info.ptr) + 1;
  check_cuda(cudaMemcpyAsync(flag, status, sizeof(int32_t), cudaMemcpyDeviceToDevice, g.stream),
             "cudaMemcpyAsync(status)");
  if (g.pr * g.pc > 1)
    check_nccl(api().ncclAllReduce(flag, flag, 1, ncclInt32, ncclMax, ctx.comm, g.stream), "ncclAllReduce(status)");
  int32_t agreed = read_int32(flag, 1, g.stream)[0];
  check_cuda(cudaMemcpyAsync(status, flag, sizeof(int32_t), cudaMemcpyDeviceToDevice, g.stream),
             "cudaMemcpyAsync(status)");
  return agreed;
}

int32_t entry_status(GridCall& g, cusolverStatus_t st, int32_t* status, const char* call) {
  if (st != CUSOLVER_STATUS_SUCCESS && !failed_execution(st)) check_mp(st, call);
  const int32_t info = read_int32(status, 1, g.stream)[0];
  const int32_t v = st != CUSOLVER_STATUS_SUCCESS && info == 0 ? -1 : info;
  if (v != info) set_status(g, status, v);
  return v;
}

void set_status(GridCall& g, int32_t* status, int32_t v) {
  check_cuda(fill_int32(status, 1, v, g.stream), "fill status");
}

int32_t failure_status(GridCall& g, int32_t* status, int32_t fallback) {
  const int32_t info = read_int32(status, 1, g.stream)[0];
  const int32_t v = info > 0 ? info : fallback;
  if (v != info) set_status(g, status, v);
  return v;
}

bool fill_failed(GridCall& g, int32_t status, std::initializer_list<EntryOutput> outputs) {
  if (status == 0) return false;
  for (const EntryOutput& out : outputs)
    check_cuda(cudaMemsetAsync(out.ptr, 0xFF, out.bytes, g.stream), "cudaMemsetAsync(failed outputs)");
  return true;
}

cublasHandle_t blas_handle(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, cublasHandle_t> handles;
  int device = 0;
  check_cuda(cudaStreamGetDevice(stream, &device), "cudaStreamGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& h = handles[{device, stream}];
  if (h) return h;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cublasHandle_t made = nullptr;
  check_blas(api().cublasCreate(&made), "cublasCreate");
  if (cublasStatus_t st = api().cublasSetStream(made, stream); st != CUBLAS_STATUS_SUCCESS) {
    api().cublasDestroy(made);
    check_blas(st, "cublasSetStream");
  }
  h = made;
  return h;
}

// ---------------------------------------------------------------------------------------------
// Timings
// ---------------------------------------------------------------------------------------------
TimedCall::TimedCall(std::string k) : kind(std::move(k)) {
  t0.create();
  t1.create();
  tf.create();
  t2.create();
}

void record_timing(int device, std::unique_ptr<TimedCall> call, cudaStream_t stream) {
  check_cuda(cudaEventRecord(call->t2.ev, stream), "cudaEventRecord");
  std::lock_guard<std::mutex> lock(cache().mu);
  auto& calls = cache().devices[device].calls;
  if (calls.size() >= kMaxTimed) calls.erase(calls.begin());
  calls.push_back(std::move(call));
}

std::vector<Timing> last_timings() {
  std::vector<Timing> out;
  std::lock_guard<std::mutex> lock(cache().mu);
  for (auto& [dev, ds] : cache().devices) {
    std::map<std::string, Timing> by_kind;
    for (auto& c : ds.calls) {
      Timing& t = by_kind[c->kind];
      if (t.calls == 0) {
        t.device = dev;
        t.kind = c->kind;
        t.valid = true;
      }
      t.calls += 1;
      float a = 0, b = 0, f = 0;
      if (cudaEventSynchronize(c->t2.ev) == cudaSuccess &&
          cudaEventElapsedTime(&a, c->t0.ev, c->t1.ev) == cudaSuccess &&
          cudaEventElapsedTime(&b, c->t1.ev, c->t2.ev) == cudaSuccess &&
          (!c->factored || cudaEventElapsedTime(&f, c->t1.ev, c->tf.ev) == cudaSuccess)) {
        t.layout_ms += a;
        t.solver_ms += b;
        t.factor_ms += f;
      } else {
        t.valid = false;
      }
    }
    for (auto& [kind, t] : by_kind) out.push_back(t);
  }
  return out;
}

void reset_timings() {
  std::lock_guard<std::mutex> lock(cache().mu);
  for (auto& [dev, ds] : cache().devices) ds.calls.clear();
}

void set_process_index(int index) { g_process_index = index; }
int process_index() { return g_process_index; }

int cusolvermp_version() { return g_cusolvermp_version; }

int probe_cusolvermp_version(int device) {
  if (g_cusolvermp_version >= 0 || !api().loaded || device < 0) return g_cusolvermp_version;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return -1;
  if (cudaSetDevice(device) != cudaSuccess) return -1;
  cusolverMpHandle_t h = nullptr;
  int v = -1;
  if (api().cusolverMpCreate(&h, device, nullptr) == CUSOLVER_STATUS_SUCCESS) {
    if (api().cusolverMpGetVersion(h, &v) == CUSOLVER_STATUS_SUCCESS && v >= 0) g_cusolvermp_version = v;
    api().cusolverMpDestroy(h);
  }
  cudaSetDevice(previous);
  return g_cusolvermp_version;
}

CacheInfo cache_info() {
  CacheInfo info;
  std::vector<std::shared_ptr<Context>> held;  // taken under the cache's lock, read under each context's
  {
    std::lock_guard<std::mutex> lock(cache().mu);
    for (auto& [k, ctx] : cache().contexts) held.push_back(ctx);
  }
  info.communicators = (int)held.size();
  for (const std::shared_ptr<Context>& ctx : held) {
    // A call holds ctx->calls while it adds descriptors or grows the layout scratch (and may take
    // the cache's lock meanwhile): that lock is taken here only once the cache's is released.
    std::lock_guard<std::mutex> busy(ctx->calls);
    info.descriptors += (int)ctx->descs.size();
    info.workspace_bytes += ctx->work.bytes + ctx->scratch.bytes;
  }
  info.cusolvermp_version = g_cusolvermp_version;
  return info;
}

void clear_cache() {
  std::map<std::string, std::shared_ptr<Context>> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(cache().mu);
  dropped.swap(cache().contexts);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxmg_identity, IdentityImpl,
    ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ret<ffi::Buffer<ffi::S32>>());  // this device's identity

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_nccl_id, NcclIdImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<Members>()                  // members in rank order
                                  .Arg<Rank>()                     // this member's rank
                                  .Ret<ffi::Buffer<ffi::S32>>());  // ncclUniqueId words, or zeros

}  // namespace jaxmg
