#include "solver.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "dynload.h"
#include "layout.h"
#include "trsolve.h"
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

thread_local std::string t_where = "rank ?";

// JAXMG_NATIVE_DEBUG=1 traces every step of a native call to stderr.
bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("JAXMG_NATIVE_DEBUG");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}
// Strings are built without iostreams: on the GPU machines the process's libstdc++ locale
// facets differ from the ones this module is compiled against, and ostream numeric output crashed.
inline std::string str_of(const std::string& s) { return s; }
inline std::string str_of(const char* s) { return s; }
template <typename T>
std::string str_of(T v) { return std::to_string(v); }
template <typename... Ts>
std::string cat(const Ts&... parts) {
  std::string out;
  (out.append(str_of(parts)), ...);
  return out;
}
#define JAXMG_TRACE(...)                                                      \
  do {                                                                        \
    if (debug_enabled()) {                                                    \
      std::string _m = cat("[jaxmg native ", t_where, "] ", __VA_ARGS__, "\n"); \
      std::fputs(_m.c_str(), stderr);                                         \
      std::fflush(stderr);                                                    \
    }                                                                         \
  } while (0)  // "rank r of n (device d)", set once known

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

// Plan for filling the strictly lower triangle of a Hermitian matrix M (upper triangle valid),
// where the permuted factorization reads it (the strictly lower part of diagonal tiles, and the
// lower tiles that land in the permuted lower triangle: about half of them), in a
// block layout (process (p, q) owns rows [p*mloc, ...) and columns [q*nloc, ...), column-major
// local blocks, ld = mloc) from the conjugate transposes of the upper tiles, with NCCL
// point-to-point for tiles owned by another process. Source and destination tiles never
// overlap (one is strictly upper, the other strictly lower), so it runs in place.
struct SymPlan {
  DeviceBuffer offsets;            // int64 pairs, see below
  int64_t n_local = 0, n_diag = 0;  // local pairs first, then diagonal tiles
  struct Chunk { int peer, slot; int64_t send_at, send_n, recv_at, recv_n; };
  std::vector<std::vector<Chunk>> rounds;
  int64_t chunk_tiles = 1;
  int npeers = 0;
  DeviceBuffer cycles;  // sigma's cycles, where a 1 x P grid's row tiles are permuted (sigma_cycles)
  int64_t cycles_len = 0;
};

// Everything cached for one grid membership on one device.
struct Context {
  int device = -1;
  int nranks = 0, rank = 0;
  ncclComm_t comm = nullptr;
  cusolverMpHandle_t handle = nullptr;
  std::map<std::pair<int, int>, std::unique_ptr<Grid>> grids;
  std::map<std::string, std::unique_ptr<Descriptors>> descs;
  std::map<std::string, std::unique_ptr<SymPlan>> plans;
  DeviceBuffer work, scratch, info;
  std::vector<char> host_work;
  TiledSolve tiled;  // potrs on a 1 x P grid (cuBLAS handle, workspace)
  ~Context() {
    plans.clear();
    descs.clear();
    grids.clear();
    if (handle) api().cusolverMpDestroy(handle);
    if (comm) api().ncclCommDestroy(comm);
  }
};

struct TimedCall {
  Event t0, t1, tf, t2;  // start, after the layout step, after the first potrf, after cuSOLVERMp
  bool factored = false;   // tf recorded (a factor call)
};

struct DeviceState {
  std::vector<std::unique_ptr<TimedCall>> calls;  // since the last reset (at most kMaxTimed kept)
};
constexpr size_t kMaxTimed = 256;

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

void record_timing(int dev, std::unique_ptr<TimedCall> call) {
  std::lock_guard<std::mutex> lock(cache().mu);
  auto& calls = cache().devices[dev].calls;
  if (calls.size() >= kMaxTimed) calls.erase(calls.begin());
  calls.push_back(std::move(call));
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


std::unique_ptr<SymPlan> make_sym_plan(int64_t n, int64_t T, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc,
                                       int rank, int64_t scratch_elems, cudaStream_t stream) {
  auto plan = std::make_unique<SymPlan>();
  const int64_t K = n / T, kr = mloc / T, kc = nloc / T, nranks = pr * pc;
  auto owner = [&](int64_t R, int64_t C) { return (R / kr) + (C / kc) * pr; };
  auto offset = [&](int64_t R, int64_t C) { return (R % kr) * T + (C % kc) * T * mloc; };
  // Block tile R is tile cyclic(R) of the permuted matrix S^T M S (P processes along the
  // permuted dimension(s); the identity on a 1x1 grid). cuSOLVERMp (uplo=LOWER) reads only the
  // permuted lower triangle: a lower tile (R, C) of M needs filling only where it lands there.
  const int64_t P = std::max(pr, pc), kp = K / P;
  auto cyclic = [&](int64_t R) { return (R % kp) * P + R / kp; };
  std::vector<int64_t> local, diag;
  std::vector<std::vector<int64_t>> send(nranks), recv(nranks);   // per peer: source / destination offsets
  std::vector<int64_t> count(nranks * nranks, 0);                   // tiles from src to dst
  for (int64_t R = 0; R < K; ++R) {
    for (int64_t C = 0; C <= R; ++C) {
      int64_t d = owner(R, C), s = owner(C, R);
      if (R == C) {
        if (d == rank) { diag.push_back(offset(R, C)); diag.push_back(0); }
        continue;
      }
      if (cyclic(R) < cyclic(C)) continue;  // lands in the permuted upper triangle: never read
      if (d == s) {
        if (d == rank) { local.push_back(offset(C, R)); local.push_back(offset(R, C)); }
        continue;
      }
      count[s * nranks + d] += 1;
      if (d == rank) recv[s].push_back(offset(R, C));
      if (s == rank) send[d].push_back(offset(C, R));
    }
  }
  plan->npeers = (int)std::max<int64_t>(1, nranks - 1);
  plan->chunk_tiles = std::max<int64_t>(1, scratch_elems / (2 * plan->npeers * T * T));
  int64_t nrounds = 0;
  for (int64_t c : count) nrounds = std::max(nrounds, (c + plan->chunk_tiles - 1) / plan->chunk_tiles);
  std::vector<int64_t> all(local);
  plan->n_local = (int64_t)local.size() / 2;
  all.insert(all.end(), diag.begin(), diag.end());
  plan->n_diag = (int64_t)diag.size() / 2;
  plan->rounds.resize(nrounds);
  const int64_t slot = plan->chunk_tiles * T * T;  // elements per peer slot in each of send/recv halves
  for (int64_t k = 0; k < nrounds; ++k) {
    int slot_index = 0;
    for (int peer = 0; peer < nranks; ++peer) {
      if (peer == rank) continue;
      SymPlan::Chunk ch{peer, slot_index, 0, 0, 0, 0};
      int64_t s0 = k * plan->chunk_tiles;
      int64_t sn = std::max<int64_t>(0, std::min<int64_t>(plan->chunk_tiles, (int64_t)send[peer].size() - s0));
      int64_t rn = std::max<int64_t>(0, std::min<int64_t>(plan->chunk_tiles, (int64_t)recv[peer].size() - s0));
      ch.send_at = (int64_t)all.size() / 2;
      ch.send_n = sn;
      for (int64_t t = 0; t < sn; ++t) {  // source in a -> send slot (conjugate-transposed)
        all.push_back(send[peer][s0 + t]);
        all.push_back(slot_index * slot + t * T * T);
      }
      ch.recv_at = (int64_t)all.size() / 2;
      ch.recv_n = rn;
      for (int64_t t = 0; t < rn; ++t) {  // recv slot -> destination in a
        all.push_back(slot_index * slot + t * T * T);
        all.push_back(recv[peer][s0 + t]);
      }
      if (sn || rn) plan->rounds[k].push_back(ch);
      ++slot_index;
    }
  }
  if (!all.empty()) {
    plan->offsets.ensure(all.size() * sizeof(int64_t), "cudaMalloc(layout plan)");
    check_cuda(cudaMemcpyAsync(plan->offsets.ptr, all.data(), all.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync(layout plan)");
  }
  const std::vector<int32_t> cycles = pr == 1 && pc > 1 ? sigma_cycles(K, pc) : std::vector<int32_t>();
  if (!cycles.empty()) {
    plan->cycles.ensure(cycles.size() * sizeof(int32_t), "cudaMalloc(layout cycles)");
    plan->cycles_len = (int64_t)cycles.size();
    check_cuda(cudaMemcpyAsync(plan->cycles.ptr, cycles.data(), cycles.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream),
               "cudaMemcpyAsync(layout cycles)");
  }
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the host vectors go now
  return plan;
}

void run_sym_plan(const SymPlan& plan, ncclComm_t comm, char* a, int64_t ld, int64_t T, int code, int elem,
                  char* scratch, cudaStream_t stream) {
  const int64_t* offs = static_cast<const int64_t*>(plan.offsets.ptr);
  check_cuda(copy_tiles(a, ld, a, ld, offs, plan.n_local, T, code, true, stream), "copy_tiles(local)");
  check_cuda(symmetrize_diag_tiles(a, ld, offs + 2 * plan.n_local, plan.n_diag, T, code, stream),
             "symmetrize_diag_tiles");
  const int64_t slot_elems = plan.chunk_tiles * T * T;
  char* send_base = scratch;
  char* recv_base = scratch + plan.npeers * slot_elems * elem;
  for (const auto& round : plan.rounds) {
    for (const auto& ch : round)
      check_cuda(copy_tiles(a, ld, send_base, T, offs + 2 * ch.send_at, ch.send_n, T, code, true, stream),
                 "copy_tiles(pack)");
    check_nccl(api().ncclGroupStart(), "ncclGroupStart");
    for (const auto& ch : round) {
      size_t bytes_s = (size_t)(ch.send_n * T * T * elem), bytes_r = (size_t)(ch.recv_n * T * T * elem);
      if (bytes_s)
        check_nccl(api().ncclSend(send_base + ch.slot * slot_elems * elem, bytes_s, ncclUint8, ch.peer, comm, stream),
                   "ncclSend");
      if (bytes_r)
        check_nccl(api().ncclRecv(recv_base + ch.slot * slot_elems * elem, bytes_r, ncclUint8, ch.peer, comm, stream),
                   "ncclRecv");
    }
    check_nccl(api().ncclGroupEnd(), "ncclGroupEnd");
    for (const auto& ch : round)
      check_cuda(copy_tiles(recv_base, T, a, ld, offs + 2 * ch.recv_at, ch.recv_n, T, code, false, stream),
                 "copy_tiles(unpack)");
  }
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
    JAXMG_TRACE("identity handler");
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
    JAXMG_TRACE("nccl id handler");
    require_loaded();
    int dev = stream_device(stream);
    JAXMG_TRACE("device ", dev);
    size_t n = members_buf.dimensions().back();
    std::vector<int32_t> members = read_int32(members_buf.typed_data(), n, stream);
    JAXMG_TRACE("members read: ", n);
    int rank = read_int32(rank_buf.typed_data(), 1, stream)[0];
    JAXMG_TRACE("rank read: ", rank);
    t_where = "rank " + std::to_string(rank) + " of " + std::to_string(n) + " (device " + std::to_string(dev) + ")";
    static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId size");
    std::string key = members_key(dev, members);
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    std::vector<int32_t>& words = c.pending_ids[key];  // stable host memory for the async copy
    words.assign(32, 0);
    if (!c.contexts.count(key) && rank == 0) {
      ncclUniqueId id;
      JAXMG_TRACE("calling ncclGetUniqueId");
      check_nccl(api().ncclGetUniqueId(&id), "ncclGetUniqueId");
      JAXMG_TRACE("ncclGetUniqueId done");
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
  JAXMG_TRACE("creating communicator of ", members.size(), " members");
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
  JAXMG_TRACE("ncclCommInitRank done");
  check_mp(api().cusolverMpCreate(&ctx->handle, dev, stream), "cusolverMpCreate");
  JAXMG_TRACE("cusolverMpCreate done");
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

struct Job {
  cudaStream_t stream;
  const void* a_in = nullptr;  // local matrix as given
  void* a = nullptr;           // where the factor lives (a_in itself when aliased)
  size_t a_bytes = 0;
  int64_t a_count = 0;         // elements (all batches)
  const void* b_in = nullptr;
  void* x = nullptr;
  size_t b_bytes = 0;
  int64_t b_count = 0;
  ffi::DataType dtype;
  const int32_t* members_d;
  size_t nmembers;
  const int32_t* id_d;
  const int32_t* rank_d;
  void* logdet = nullptr;
  int32_t* status = nullptr;
  int64_t n, tile, pr, pc, mloc, nloc, nrhs, mode, uplo;
  bool factor, solve;
};

// The one implementation behind both handlers:
//   factor: potrf on the local column-major block (mloc x nloc, ld mloc) of the n x n matrix on a
//           pr x pc grid with tile x tile blocks, batched over leading dimensions;
//           mode 0: the block is already block-cyclic (natural order of the padded matrix);
//           mode 1: the block is a block of a block layout of a Hermitian matrix whose `uplo`-
//                   opposite triangle is unset: the triangle is filled in (symmetrize, NCCL for
//                   remote tiles) and a 1-D grid's local tiles are reordered, in place, so that
//                   the data is the block-cyclic layout of S^T M S (see jaxmg/kernels/native.py);
//   solve:  potrs with the factor on the right-hand sides (mloc x nrhs local, process column 0);
//   always: the local part of log det (sum of log of the owned diagonal entries).
void run_job(const Job& j) {
  require_loaded();
  cudaStream_t stream = j.stream;
  int dev = stream_device(stream);
  std::vector<int32_t> members = read_int32(j.members_d, j.nmembers, stream);
  int rank = read_int32(j.rank_d, 1, stream)[0];
  t_where = "rank " + std::to_string(rank) + " of " + std::to_string(j.nmembers) + " (device " +
            std::to_string(dev) + ")";
  const int64_t n = j.n, tile = j.tile, pr = j.pr, pc = j.pc, mloc = j.mloc, nloc = j.nloc, nrhs = j.nrhs;
  if ((int64_t)j.nmembers != pr * pc) throw Failure("jaxmg native: grid size mismatch on " + t_where);
  int code = 0, elem = 0;
  cudaDataType dtype = cuda_type(j.dtype, &code, &elem);
  const int64_t mat = mloc * nloc;
  if (mat <= 0 || j.a_count % mat) throw Failure("jaxmg native: bad local matrix shape on " + t_where);
  const int64_t batch = j.a_count / mat;
  const int64_t bsz = mloc * nrhs;
  if (j.solve && j.b_count != batch * bsz)
    throw Failure("jaxmg native: right-hand side shape mismatch on " + t_where);
  if (j.factor && j.a != j.a_in)
    check_cuda(cudaMemcpyAsync(j.a, j.a_in, j.a_bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync(a to factor)");
  if (j.solve && j.x != j.b_in)
    check_cuda(cudaMemcpyAsync(j.x, j.b_in, j.b_bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync(b to x)");

  JAXMG_TRACE("call: factor ", j.factor, " solve ", j.solve, " n ", n, " tile ", tile, " grid ", pr
             , "x", pc, " local ", mloc, "x", nloc, " nrhs ", nrhs, " mode ", j.mode, " uplo "
             , j.uplo, " batch ", batch);
  Context& ctx = get_context(dev, members, rank, j.id_d, stream);
  check_mp(api().cusolverMpSetStream(ctx.handle, stream), "cusolverMpSetStream");
  cusolverMpGrid_t grid = get_grid(ctx, (int)pr, (int)pc);
  const int64_t p = rank % pr, q = rank / pr;
  const cublasFillMode_t fill = j.uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;

  const std::string dkey = cat(pr, "x", pc, ":", code, ":", n, ":", tile, ":", mloc, ":", nrhs, ":", j.mode);
  auto& dslot = ctx.descs[dkey];
  if (!dslot) {
    auto d = std::make_unique<Descriptors>();
    check_mp(api().cusolverMpCreateMatrixDesc(&d->a, grid, dtype, n, n, tile, tile, 0, 0, mloc),
             "cusolverMpCreateMatrixDesc(A)");
    check_mp(api().cusolverMpCreateMatrixDesc(&d->b, grid, dtype, n, nrhs, tile, nrhs, 0, 0, mloc),
             "cusolverMpCreateMatrixDesc(B)");
    dslot = std::move(d);
    JAXMG_TRACE("descriptors created");
  }
  Descriptors& desc = *dslot;
  char* a_ptr = static_cast<char*>(j.a);
  char* x_ptr = static_cast<char*>(j.x);

  size_t dwork = 256, hwork = 0;
  if (j.factor) {
    size_t d1 = 0, h1 = 0;
    check_mp(api().cusolverMpPotrf_bufferSize(ctx.handle, fill, n, a_ptr, 1, 1, desc.a, dtype, &d1, &h1),
             "cusolverMpPotrf_bufferSize");
    dwork = std::max(dwork, d1);
    hwork = std::max(hwork, h1);
  }
  // potrs with the lower factor on a 1 x P grid: the tiled solve (trsolve.h) where it was measured
  // faster than cuSOLVERMp's potrs (2 x H200, float64, one right-hand side: 1.5 vs 1.8 ms with 8
  // tiles, N = 8192; 7.1 vs 6.3 ms with 16, N = 32768), so up to kTiledSolveMaxTiles tiles;
  // JAXMG_NATIVE_SOLVE=tiled or =cusolvermp forces one. Needs cuBLAS.
  constexpr int64_t kTiledSolveMaxTiles = 8;
  const char* solve_choice = std::getenv("JAXMG_NATIVE_SOLVE");
  const bool force_tiled = solve_choice && std::strcmp(solve_choice, "tiled") == 0;
  const bool force_mp = solve_choice && std::strcmp(solve_choice, "cusolvermp") == 0;
  const bool tiled = j.solve && pr == 1 && fill == CUBLAS_FILL_MODE_LOWER && tiled_solve_available() && !force_mp &&
                     (force_tiled || n / tile <= kTiledSolveMaxTiles);
  if (j.solve && !tiled) {
    size_t d2 = 0, h2 = 0;
    check_mp(api().cusolverMpPotrs_bufferSize(ctx.handle, fill, n, nrhs, a_ptr, 1, 1, desc.a, x_ptr, 1, 1, desc.b,
                                              dtype, &d2, &h2),
             "cusolverMpPotrs_bufferSize");
    dwork = std::max(dwork, d2);
    hwork = std::max(hwork, h2);
  }
  ctx.work.ensure(dwork, "cudaMalloc(cuSOLVERMp workspace)");
  if (ctx.host_work.size() < std::max<size_t>(hwork, 1)) ctx.host_work.resize(std::max<size_t>(hwork, 1));
  ctx.info.ensure(sizeof(int32_t) * 4, "cudaMalloc(info)");
  JAXMG_TRACE("workspace device ", dwork, " host ", hwork);

  const bool layout = j.factor && j.mode == 1;
  const bool reorder = layout && ((pr == 1 && pc > 1) || (pc == 1 && pr > 1));
  if (layout && pr > 1 && pc > 1 && pr != pc)
    throw Failure("jaxmg native: the in-place layout needs a square or 1-D grid, got " + std::to_string(pr) + "x" +
                  std::to_string(pc));
  int64_t scratch_elems = 0;
  SymPlan* plan = nullptr;
  if (layout) {
    int64_t npeers = std::max<int64_t>(1, pr * pc - 1);
    scratch_elems = std::max<int64_t>(std::min<int64_t>(mat, (int64_t)32 << 20), 2 * npeers * tile * tile);
    ctx.scratch.ensure((size_t)scratch_elems * elem, "cudaMalloc(layout scratch)");
    auto& pslot = ctx.plans[dkey];
    if (!pslot) pslot = make_sym_plan(n, tile, pr, pc, mloc, nloc, rank, scratch_elems, stream);
    plan = pslot.get();
  }

  auto ev = std::make_unique<TimedCall>();
  ev->t0.create();
  ev->t1.create();
  ev->tf.create();
  ev->t2.create();
  check_cuda(cudaEventRecord(ev->t0.ev, stream), "cudaEventRecord");
  for (int64_t k = 0; k < batch && layout; ++k) {
    char* ak = a_ptr + k * mat * elem;
    run_sym_plan(*plan, ctx.comm, ak, mloc, tile, code, elem, static_cast<char*>(ctx.scratch.ptr), stream);
    JAXMG_TRACE("symmetrized (", plan->rounds.size(), " exchange rounds)");
    if (reorder) {
      cudaError_t e = (pr == 1) ? permute_row_tiles(ak, elem, nloc, mloc, tile,
                                                    static_cast<const int32_t*>(plan->cycles.ptr), plan->cycles_len,
                                                    stream)
                                : reorder_col_tiles(ak, elem, mloc, nloc, mloc, tile, pr, ctx.scratch.ptr,
                                                    scratch_elems, stream);
      check_cuda(e, "local tile reorder");
    }
  }
  check_cuda(cudaEventRecord(ev->t1.ev, stream), "cudaEventRecord");
  for (int64_t k = 0; k < batch; ++k) {
    char* ak = a_ptr + k * mat * elem;
    bool failed = false;
    if (j.factor) {
      cusolverStatus_t st = api().cusolverMpPotrf(ctx.handle, fill, n, ak, 1, 1, desc.a, dtype, ctx.work.ptr,
                                                  ctx.work.bytes, ctx.host_work.data(), ctx.host_work.size(),
                                                  j.status + k);
      JAXMG_TRACE("potrf returned ", (int)st);
      // cuSOLVERMp 0.8 reports a matrix that is not positive definite as an internal error (and
      // info > 0): that is a result (status != 0, NaN outputs), not an exception.
      bool not_pd = st == CUSOLVER_STATUS_INTERNAL_ERROR || st == CUSOLVER_STATUS_EXECUTION_FAILED;
      if (st != CUSOLVER_STATUS_SUCCESS && !not_pd) check_mp(st, "cusolverMpPotrf");
      // Agree on the outcome over the grid (max of info, or -1 where the call failed without
      // info), so that every member skips or runs potrs alike.
      int32_t* flag = static_cast<int32_t*>(ctx.info.ptr) + 1;
      if (not_pd) {
        std::vector<int32_t> info = read_int32(j.status + k, 1, stream);
        int32_t v = info[0] > 0 ? info[0] : (int32_t)n + 1;
        check_cuda(cudaMemcpy(j.status + k, &v, sizeof(v), cudaMemcpyHostToDevice), "cudaMemcpy(status)");
      }
      check_cuda(cudaMemcpyAsync(flag, j.status + k, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync(status)");
      if (pr * pc > 1)
        check_nccl(api().ncclAllReduce(flag, flag, 1, ncclInt32, ncclMax, ctx.comm, stream), "ncclAllReduce(status)");
      int32_t agreed = read_int32(flag, 1, stream)[0];
      failed = agreed != 0;
      if (failed) {
        check_cuda(cudaMemcpyAsync(j.status + k, flag, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream),
                   "cudaMemcpyAsync(status)");
        // A failed factor is NaN everywhere (all-ones bytes are a NaN in every floating type), so
        // whatever consumes it (solves, log det) gives NaN, not a partial factor's numbers.
        check_cuda(cudaMemsetAsync(ak, 0xFF, (size_t)(mat * elem), stream), "cudaMemsetAsync(failed factor)");
      }
      if (k == 0) {
        check_cuda(cudaEventRecord(ev->tf.ev, stream), "cudaEventRecord");
        ev->factored = true;
      }
    }
    if (j.solve && !failed && tiled) {
      try {
        tiled_potrs(ctx.tiled, ctx.comm, code, ak, x_ptr + k * bsz * elem, n, tile, (int)pc, rank, nrhs, stream);
      } catch (const std::exception& e) {
        fail("tiled potrs", e.what());
      }
      JAXMG_TRACE("tiled potrs issued");
    } else if (j.solve && !failed) {
      check_mp(api().cusolverMpPotrs(ctx.handle, fill, n, nrhs, ak, 1, 1, desc.a, x_ptr + k * bsz * elem, 1, 1,
                                     desc.b, dtype, ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(),
                                     ctx.host_work.size(), static_cast<int32_t*>(ctx.info.ptr)),
               "cusolverMpPotrs");
      JAXMG_TRACE("potrs issued");
    }
  }
  check_cuda(cudaEventRecord(ev->t2.ev, stream), "cudaEventRecord");
  record_timing(dev, std::move(ev));
  if (debug_enabled()) {
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize(debug)");
    JAXMG_TRACE("stream synchronized after cuSOLVERMp");
  }
  if (!j.factor) check_cuda(fill_int32(j.status, batch, 0, stream), "fill status");
  if (j.logdet) {
    size_t real_bytes = (code == 0 || code == 2) ? 4 : 8;
    for (int64_t k = 0; k < batch; ++k) {
      char* ak = a_ptr + k * mat * elem;
      check_cuda(local_logdet(ak, code, mloc, n, tile, pr, pc, p, q, static_cast<char*>(j.logdet) + k * real_bytes,
                              stream),
                 "log det kernel");
    }
  }
}

// The Job of one handler call: buffers, attributes, and where the factor lives (`factor_at`:
// the aliased output for potrf, the read-only input for potrs).
Job make_job(cudaStream_t stream, const ffi::AnyBuffer& a, void* factor_at, const ffi::AnyBuffer& b, void* x,
             const ffi::Buffer<ffi::S32>& members_buf, const ffi::Buffer<ffi::S32>& id_buf,
             const ffi::Buffer<ffi::S32>& rank_buf, void* logdet, int32_t* status, int64_t n, int64_t tile,
             int64_t pr, int64_t pc, int64_t mloc, int64_t nloc, int64_t nrhs, int64_t mode, int64_t solve,
             int64_t uplo, bool factor) {
  Job j;
  j.stream = stream;
  j.a_in = a.untyped_data();
  j.a = factor_at;
  j.a_bytes = a.size_bytes();
  j.a_count = (int64_t)a.element_count();
  j.b_in = b.untyped_data();
  j.x = x;
  j.b_bytes = b.size_bytes();
  j.b_count = (int64_t)b.element_count();
  j.dtype = a.element_type();
  j.members_d = members_buf.typed_data();
  j.nmembers = members_buf.dimensions().back();
  j.id_d = id_buf.typed_data();
  j.rank_d = rank_buf.typed_data();
  j.logdet = logdet;
  j.status = status;
  j.n = n, j.tile = tile, j.pr = pr, j.pc = pc, j.mloc = mloc, j.nloc = nloc, j.nrhs = nrhs, j.mode = mode;
  j.uplo = uplo;
  j.factor = factor;
  j.solve = solve != 0;
  return j;
}

ffi::Error PotrfImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Buffer<ffi::S32> members_buf,
                     ffi::Buffer<ffi::S32> id_buf, ffi::Buffer<ffi::S32> rank_buf, ffi::Result<ffi::AnyBuffer> a_out,
                     ffi::Result<ffi::AnyBuffer> x_out, ffi::Result<ffi::AnyBuffer> logdet_out,
                     ffi::Result<ffi::Buffer<ffi::S32>> status_out, int64_t n, int64_t tile, int64_t pr, int64_t pc,
                     int64_t mloc, int64_t nloc, int64_t nrhs, int64_t mode, int64_t solve, int64_t uplo) {
  try {
    run_job(make_job(stream, a, a_out->untyped_data(), b, x_out->untyped_data(), members_buf, id_buf, rank_buf,
                     logdet_out->untyped_data(), status_out->typed_data(), n, tile, pr, pc, mloc, nloc, nrhs, mode,
                     solve, uplo, /*factor=*/true));
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// potrs (and log det) with a factor made by jaxmg_potrf: the factor is only read.
ffi::Error PotrsImpl(cudaStream_t stream, ffi::AnyBuffer f, ffi::AnyBuffer b, ffi::Buffer<ffi::S32> members_buf,
                     ffi::Buffer<ffi::S32> id_buf, ffi::Buffer<ffi::S32> rank_buf, ffi::Result<ffi::AnyBuffer> x_out,
                     ffi::Result<ffi::AnyBuffer> logdet_out, ffi::Result<ffi::Buffer<ffi::S32>> status_out, int64_t n,
                     int64_t tile, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc, int64_t nrhs, int64_t mode,
                     int64_t solve, int64_t uplo) {
  try {
    // read only: potrs and the log-det kernel
    run_job(make_job(stream, f, const_cast<void*>(f.untyped_data()), b, x_out->untyped_data(), members_buf, id_buf,
                     rank_buf, logdet_out->untyped_data(), status_out->typed_data(), n, tile, pr, pc, mloc, nloc,
                     nrhs, mode, solve, uplo, /*factor=*/false));
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_potrs, PotrsImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
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
    t.calls = (int)ds.calls.size();
    t.valid = !ds.calls.empty();
    for (auto& c : ds.calls) {
      float a = 0, b = 0, f = 0;
      if (cudaEventSynchronize(c->t2.ev) == cudaSuccess && cudaEventElapsedTime(&a, c->t0.ev, c->t1.ev) == cudaSuccess &&
          cudaEventElapsedTime(&b, c->t1.ev, c->t2.ev) == cudaSuccess &&
          (!c->factored || cudaEventElapsedTime(&f, c->t1.ev, c->tf.ev) == cudaSuccess)) {
        t.layout_ms += a;
        t.solver_ms += b;
        t.factor_ms += f;
      } else {
        t.valid = false;
      }
    }
    out.push_back(t);
  }
  return out;
}

void reset_timings() {
  std::lock_guard<std::mutex> lock(cache().mu);
  for (auto& [dev, ds] : cache().devices) ds.calls.clear();
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
