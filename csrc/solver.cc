#include "solver.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "dynload.h"
#include "layout.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxmg {
namespace {

int g_process_index = 0;
int g_cusolvermp_version = -1;

// ---------------------------------------------------------------------------------------------
// One error path: every failure throws Failure with a message naming the call, status and rank;
// the handler boundary turns it into an ffi::Error (a Python exception).
// ---------------------------------------------------------------------------------------------
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

thread_local std::string t_where = "rank ?";  // "rank r of n (device d)", set once known

[[noreturn]] void fail(const std::string& call, const std::string& status) {
  throw Failure("jaxmg native: " + call + " failed with " + status + " on " + t_where);
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    fail(call, std::string("CUDA error ") + std::to_string((int)e) + " (" + cudaGetErrorName(e) + ": " +
                   cudaGetErrorString(e) + ")");
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) {
    const char* s = api().ncclGetErrorString ? api().ncclGetErrorString(r) : "?";
    fail(call, std::string("NCCL status ") + std::to_string((int)r) + " (" + s + ")");
  }
}

const char* cusolver_status_name(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default: return "cusolverStatus";
  }
}

void check_mp(cusolverStatus_t s, const char* call) {
  if (s != CUSOLVER_STATUS_SUCCESS)
    fail(call, std::string("cuSOLVERMp status ") + std::to_string((int)s) + " (" + cusolver_status_name(s) + ")");
}

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
  void reset() {
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  void ensure(size_t want, const char* what) {
    if (want <= bytes) return;
    reset();
    check_cuda(cudaMalloc(&ptr, want), what);
    bytes = want;
  }
};

struct Event {
  cudaEvent_t ev = nullptr;
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (ev) cudaEventDestroy(ev);
  }
  void create() {
    if (!ev) check_cuda(cudaEventCreate(&ev), "cudaEventCreate");
  }
};

struct Descriptors {
  cusolverMpMatrixDescriptor_t a = nullptr, b = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (a) api().cusolverMpDestroyMatrixDesc(a);
    if (b) api().cusolverMpDestroyMatrixDesc(b);
  }
};

struct Grid {
  cusolverMpGrid_t grid = nullptr;
  Grid() = default;
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;
  ~Grid() {
    if (grid) api().cusolverMpDestroyGrid(grid);
  }
};

// Everything cached for one grid membership on one device.
struct Context {
  int device = -1;
  int nranks = 0, rank = 0;
  ncclComm_t comm = nullptr;
  cusolverMpHandle_t handle = nullptr;
  std::map<std::pair<int, int>, std::unique_ptr<Grid>> grids;
  std::map<std::string, std::unique_ptr<Descriptors>> descs;
  DeviceBuffer work, scratch, info;
  std::vector<char> host_work;
  ~Context() {
    descs.clear();
    grids.clear();
    if (handle) api().cusolverMpDestroy(handle);
    if (comm) api().ncclCommDestroy(comm);
  }
};

struct DeviceState {
  Event t0, t1, t2;
  bool recorded = false;
};

struct Cache {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Context>> contexts;  // key: device + members
  std::map<int, DeviceState> devices;
  std::map<std::string, std::vector<int32_t>> pending_ids;  // nccl ids made by the first member
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: NCCL teardown at exit can hang
  return *c;
}

std::string members_key(int device, const std::vector<int32_t>& members) {
  std::ostringstream os;
  os << "dev" << device << ":";
  for (int32_t m : members) os << m << ",";
  return os.str();
}

int stream_device(cudaStream_t stream) {
  int dev = -1;
  check_cuda(cudaStreamGetDevice(stream, &dev), "cudaStreamGetDevice");
  check_cuda(cudaSetDevice(dev), "cudaSetDevice");
  return dev;
}

std::vector<int32_t> read_int32(const void* dptr, size_t count, cudaStream_t stream) {
  std::vector<int32_t> host(count);
  check_cuda(cudaMemcpyAsync(host.data(), dptr, count * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync(device to host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host;
}

void check_one_gpu_per_process(int nranks, const std::vector<int32_t>& members) {
  // Two members in one process would need one host thread per GPU inside one collective call.
  for (size_t i = 0; i < members.size(); ++i)
    for (size_t j = i + 1; j < members.size(); ++j)
      if (members[i] / 1024 == members[j] / 1024 && members[i] != members[j])
        throw Failure("jaxmg native: one process drives several GPUs of one grid (members " +
                      std::to_string(members[i]) + " and " + std::to_string(members[j]) +
                      "); launch one process per GPU with `python -m jaxmg.launch -n NGPUS script.py`");
  (void)nranks;
}

ffi::Error to_error(const std::exception& e) { return ffi::Error::Internal(e.what()); }

cudaDataType cuda_type(ffi::DataType t, int* code, int* elem_bytes) {
  switch (t) {
    case ffi::DataType::F32: *code = 0; *elem_bytes = 4; return CUDA_R_32F;
    case ffi::DataType::F64: *code = 1; *elem_bytes = 8; return CUDA_R_64F;
    case ffi::DataType::C64: *code = 2; *elem_bytes = 8; return CUDA_C_32F;
    case ffi::DataType::C128: *code = 3; *elem_bytes = 16; return CUDA_C_64F;
    default: throw Failure("jaxmg native: unsupported dtype (float32, float64, complex64, complex128 only)");
  }
}

// ---------------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------------

ffi::Error IdentityImpl(cudaStream_t stream, ffi::Result<ffi::Buffer<ffi::S32>> out) {
  try {
    int dev = stream_device(stream);
    check_cuda(fill_int32(out->typed_data(), (int64_t)out->element_count(), g_process_index * 1024 + dev, stream),
               "fill identity");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// A new ncclUniqueId (as 32 int32 words) from the grid's first member when the communicator of
// these members is not cached yet; zeros otherwise (the caller sums over the grid).
ffi::Error NcclIdImpl(cudaStream_t stream, ffi::Buffer<ffi::S32> members_buf, ffi::Buffer<ffi::S32> rank_buf,
                      ffi::Result<ffi::Buffer<ffi::S32>> out) {
  try {
    require_loaded();
    int dev = stream_device(stream);
    size_t n = members_buf.dimensions().back();
    std::vector<int32_t> members = read_int32(members_buf.typed_data(), n, stream);
    int rank = read_int32(rank_buf.typed_data(), 1, stream)[0];
    t_where = "rank " + std::to_string(rank) + " of " + std::to_string(n) + " (device " + std::to_string(dev) + ")";
    static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId size");
    std::string key = members_key(dev, members);
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    std::vector<int32_t>& words = c.pending_ids[key];  // stable host memory for the async copy
    words.assign(32, 0);
    if (!c.contexts.count(key) && rank == 0) {
      ncclUniqueId id;
      check_nccl(api().ncclGetUniqueId(&id), "ncclGetUniqueId");
      std::memcpy(words.data(), &id, sizeof(id));
    }
    size_t count = std::min<size_t>(out->element_count(), 32);
    check_cuda(cudaMemcpyAsync(out->typed_data(), words.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream),
               "cudaMemcpyAsync(host to device)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

Context& get_context(int dev, const std::vector<int32_t>& members, int rank, const void* id_dptr,
                     cudaStream_t stream) {
  Cache& c = cache();
  std::string key = members_key(dev, members);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.contexts.find(key);
    if (it != c.contexts.end()) return *it->second;
  }
  check_one_gpu_per_process((int)members.size(), members);
  std::vector<int32_t> words = read_int32(id_dptr, 32, stream);
  ncclUniqueId id;
  std::memcpy(&id, words.data(), sizeof(id));
  bool all_zero = true;
  for (int32_t w : words) all_zero &= (w == 0);
  if (all_zero)
    throw Failure("jaxmg native: the grid's communicator id is empty on " + t_where +
                  " (the first member found its communicator cached but this member did not; "
                  "were the processes' jaxmg calls out of step?)");
  auto ctx = std::make_unique<Context>();
  ctx->device = dev;
  ctx->nranks = (int)members.size();
  ctx->rank = rank;
  check_nccl(api().ncclCommInitRank(&ctx->comm, ctx->nranks, id, rank), "ncclCommInitRank");
  check_mp(api().cusolverMpCreate(&ctx->handle, dev, stream), "cusolverMpCreate");
  if (g_cusolvermp_version < 0) {
    int v = -1;
    if (api().cusolverMpGetVersion(ctx->handle, &v) == CUSOLVER_STATUS_SUCCESS) g_cusolvermp_version = v;
  }
  std::lock_guard<std::mutex> lock(c.mu);
  auto& slot = c.contexts[key];
  slot = std::move(ctx);
  return *slot;
}

cusolverMpGrid_t get_grid(Context& ctx, int pr, int pc) {
  auto& g = ctx.grids[{pr, pc}];
  if (!g) {
    auto grid = std::make_unique<Grid>();
    check_mp(api().cusolverMpCreateDeviceGrid(ctx.handle, &grid->grid, ctx.comm, pr, pc,
                                              CUSOLVERMP_GRID_MAPPING_COL_MAJOR),
             "cusolverMpCreateDeviceGrid");
    g = std::move(grid);
  }
  return g->grid;
}

// potrf (+ potrs) on the local column-major block (mloc x nloc, ld mloc) of an n x n matrix on a
// pr x pc grid with tile x tile blocks, batched over leading dimensions.
//   mode 0: the local block is already block-cyclic (natural order of the padded matrix).
//   mode 1: the local block is a block of a block layout; a 1-D grid's local tiles are reordered
//           in place first, so that the data is the block-cyclic layout of P^T A P (see
//           jaxmg/kernels/native.py).
ffi::Error PotrfImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Buffer<ffi::S32> members_buf,
                     ffi::Buffer<ffi::S32> id_buf, ffi::Buffer<ffi::S32> rank_buf, ffi::Result<ffi::AnyBuffer> a_out,
                     ffi::Result<ffi::AnyBuffer> x_out, ffi::Result<ffi::AnyBuffer> logdet_out,
                     ffi::Result<ffi::Buffer<ffi::S32>> status_out, int64_t n, int64_t tile, int64_t pr, int64_t pc,
                     int64_t mloc, int64_t nloc, int64_t nrhs, int64_t mode, int64_t solve, int64_t uplo) {
  try {
    require_loaded();
    int dev = stream_device(stream);
    size_t nm = members_buf.dimensions().back();
    std::vector<int32_t> members = read_int32(members_buf.typed_data(), nm, stream);
    int rank = read_int32(rank_buf.typed_data(), 1, stream)[0];
    t_where = "rank " + std::to_string(rank) + " of " + std::to_string(nm) + " (device " + std::to_string(dev) + ")";
    if ((int64_t)nm != pr * pc) throw Failure("jaxmg native: grid size mismatch on " + t_where);
    int code = 0, elem = 0;
    cudaDataType dtype = cuda_type(a.element_type(), &code, &elem);
    const int64_t mat = mloc * nloc;
    if (mat <= 0 || a.element_count() % mat) throw Failure("jaxmg native: bad local matrix shape on " + t_where);
    const int64_t batch = a.element_count() / mat;
    const int64_t bsz = mloc * nrhs;
    if (solve && (int64_t)b.element_count() != batch * bsz)
      throw Failure("jaxmg native: right-hand side shape mismatch on " + t_where);
    if (a_out->untyped_data() != a.untyped_data())
      check_cuda(cudaMemcpyAsync(a_out->untyped_data(), a.untyped_data(), a.size_bytes(), cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync(a to factor)");
    if (solve && x_out->untyped_data() != b.untyped_data())
      check_cuda(cudaMemcpyAsync(x_out->untyped_data(), b.untyped_data(), b.size_bytes(), cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync(b to x)");

    Context& ctx = get_context(dev, members, rank, id_buf.typed_data(), stream);
    check_mp(api().cusolverMpSetStream(ctx.handle, stream), "cusolverMpSetStream");
    cusolverMpGrid_t grid = get_grid(ctx, (int)pr, (int)pc);
    const int64_t p = rank % pr, q = rank / pr;
    const cublasFillMode_t fill = uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;

    std::ostringstream dk;
    dk << pr << "x" << pc << ":" << code << ":" << n << ":" << tile << ":" << mloc << ":" << nrhs;
    auto& dslot = ctx.descs[dk.str()];
    if (!dslot) {
      auto d = std::make_unique<Descriptors>();
      check_mp(api().cusolverMpCreateMatrixDesc(&d->a, grid, dtype, n, n, tile, tile, 0, 0, mloc),
               "cusolverMpCreateMatrixDesc(A)");
      if (solve)
        check_mp(api().cusolverMpCreateMatrixDesc(&d->b, grid, dtype, n, nrhs, tile, nrhs, 0, 0, mloc),
                 "cusolverMpCreateMatrixDesc(B)");
      dslot = std::move(d);
    }
    Descriptors& desc = *dslot;
    char* a_ptr = static_cast<char*>(a_out->untyped_data());
    char* x_ptr = solve ? static_cast<char*>(x_out->untyped_data()) : nullptr;

    size_t dwork = 0, hwork = 0, d2 = 0, h2 = 0;
    check_mp(api().cusolverMpPotrf_bufferSize(ctx.handle, fill, n, a_ptr, 1, 1, desc.a, dtype, &dwork, &hwork),
             "cusolverMpPotrf_bufferSize");
    if (solve) {
      check_mp(api().cusolverMpPotrs_bufferSize(ctx.handle, fill, n, nrhs, a_ptr, 1, 1, desc.a, x_ptr, 1, 1, desc.b,
                                                dtype, &d2, &h2),
               "cusolverMpPotrs_bufferSize");
    }
    ctx.work.ensure(std::max<size_t>({dwork, d2, 256}), "cudaMalloc(cuSOLVERMp workspace)");
    if (ctx.host_work.size() < std::max(hwork, h2)) ctx.host_work.resize(std::max(hwork, h2));
    ctx.info.ensure(sizeof(int32_t) * 4, "cudaMalloc(info)");
    bool reorder = mode == 1 && ((pr == 1 && pc > 1) || (pc == 1 && pr > 1));
    if (mode == 1 && pr > 1 && pc > 1 && pr != pc)
      throw Failure("jaxmg native: in-place layout needs a square or 1-D grid, got " + std::to_string(pr) + "x" +
                    std::to_string(pc));
    int64_t scratch_elems = 0;
    if (reorder) {
      scratch_elems = std::min<int64_t>(mat, (int64_t)32 << 20);
      ctx.scratch.ensure((size_t)scratch_elems * elem, "cudaMalloc(layout scratch)");
    }

    DeviceState& ds = cache().devices[dev];
    ds.t0.create();
    ds.t1.create();
    ds.t2.create();
    check_cuda(cudaEventRecord(ds.t0.ev, stream), "cudaEventRecord");
    for (int64_t k = 0; k < batch; ++k) {
      char* ak = a_ptr + k * mat * elem;
      if (reorder) {
        cudaError_t e = (pr == 1) ? reorder_row_tiles(ak, elem, mloc, nloc, mloc, tile, pc, ctx.scratch.ptr,
                                                      scratch_elems, stream)
                                  : reorder_col_tiles(ak, elem, mloc, nloc, mloc, tile, pr, ctx.scratch.ptr,
                                                      scratch_elems, stream);
        check_cuda(e, "local tile reorder");
      }
    }
    check_cuda(cudaEventRecord(ds.t1.ev, stream), "cudaEventRecord");
    for (int64_t k = 0; k < batch; ++k) {
      char* ak = a_ptr + k * mat * elem;
      int32_t* info = status_out->typed_data() + k;
      check_mp(api().cusolverMpPotrf(ctx.handle, fill, n, ak, 1, 1, desc.a, dtype, ctx.work.ptr, ctx.work.bytes,
                                     ctx.host_work.data(), ctx.host_work.size(), info),
               "cusolverMpPotrf");
      if (solve) {
        check_mp(api().cusolverMpPotrs(ctx.handle, fill, n, nrhs, ak, 1, 1, desc.a, x_ptr + k * bsz * elem, 1, 1,
                                       desc.b, dtype, ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(),
                                       ctx.host_work.size(), static_cast<int32_t*>(ctx.info.ptr)),
                 "cusolverMpPotrs");
      }
    }
    check_cuda(cudaEventRecord(ds.t2.ev, stream), "cudaEventRecord");
    ds.recorded = true;
    size_t real_bytes = (code == 0 || code == 2) ? 4 : 8;
    for (int64_t k = 0; k < batch; ++k) {
      char* ak = a_ptr + k * mat * elem;
      check_cuda(local_logdet(ak, code, mloc, n, tile, pr, pc, p, q,
                              static_cast<char*>(logdet_out->untyped_data()) + k * real_bytes, stream),
                 "log det kernel");
    }
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_identity, IdentityImpl,
                              ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_nccl_id, NcclIdImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_potrf, PotrfImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("n")
                                  .Attr<int64_t>("tile")
                                  .Attr<int64_t>("pr")
                                  .Attr<int64_t>("pc")
                                  .Attr<int64_t>("mloc")
                                  .Attr<int64_t>("nloc")
                                  .Attr<int64_t>("nrhs")
                                  .Attr<int64_t>("mode")
                                  .Attr<int64_t>("solve")
                                  .Attr<int64_t>("uplo"));

void set_process_index(int index) { g_process_index = index; }
int process_index() { return g_process_index; }

std::vector<Timing> last_timings() {
  std::vector<Timing> out;
  std::lock_guard<std::mutex> lock(cache().mu);
  for (auto& [dev, ds] : cache().devices) {
    Timing t;
    t.device = dev;
    if (ds.recorded) {
      float a = 0, b = 0;
      if (cudaEventSynchronize(ds.t2.ev) == cudaSuccess && cudaEventElapsedTime(&a, ds.t0.ev, ds.t1.ev) == cudaSuccess &&
          cudaEventElapsedTime(&b, ds.t1.ev, ds.t2.ev) == cudaSuccess) {
        t.layout_ms = a;
        t.solver_ms = b;
        t.valid = true;
      }
    }
    out.push_back(t);
  }
  return out;
}

CacheInfo cache_info() {
  CacheInfo info;
  std::lock_guard<std::mutex> lock(cache().mu);
  info.communicators = (int)cache().contexts.size();
  for (auto& [k, ctx] : cache().contexts) {
    info.descriptors += (int)ctx->descs.size();
    info.workspace_bytes += ctx->work.bytes + ctx->scratch.bytes;
  }
  info.cusolvermp_version = g_cusolvermp_version;
  return info;
}

void clear_cache() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().contexts.clear();
  cache().pending_ids.clear();
}

}  // namespace jaxmg
