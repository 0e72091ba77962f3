#include "dynload.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace jaxmg {

Api& api() {
  static Api* instance = new Api();  // never destroyed: outlives every cached handle
  return *instance;
}

namespace {

std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

void* open_first(const std::vector<std::string>& candidates, std::string* path, std::vector<std::string>* log) {
  for (const auto& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h) {
      *path = c;
      log->push_back("loaded " + c);
      return h;
    }
    const char* e = dlerror();
    log->push_back("cannot load " + c + ": " + (e ? e : "?"));
  }
  return nullptr;
}

template <typename F>
bool sym(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  return true;
}

// The dependencies, each loaded where it can be (the log says which).
void open_dependencies(const std::vector<std::string>& deps, Api& a) {
  for (const auto& d : deps) {
    if (dlopen(d.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      a.log.push_back("loaded " + d);
    } else {
      const char* e = dlerror();
      a.log.push_back("cannot load dependency " + d + ": " + (e ? e : "?"));
    }
  }
}

// The required entry points of NCCL (from nccl_lib) and cuSOLVERMp (from mp_lib), the names of missing
// ones appended to `missing`; then cuSOLVERMp's optional ones.
void resolve_required(void* nccl_lib, void* mp_lib, Api& a, std::string* missing) {
  sym(nccl_lib, "ncclGetUniqueId", &a.ncclGetUniqueId, missing);
  sym(nccl_lib, "ncclCommInitRank", &a.ncclCommInitRank, missing);
  sym(nccl_lib, "ncclCommDestroy", &a.ncclCommDestroy, missing);
  sym(nccl_lib, "ncclCommAbort", &a.ncclCommAbort, missing);
  sym(nccl_lib, "ncclCommGetAsyncError", &a.ncclCommGetAsyncError, missing);
  sym(nccl_lib, "ncclGetErrorString", &a.ncclGetErrorString, missing);
  sym(nccl_lib, "ncclGetVersion", &a.ncclGetVersion, missing);
  sym(nccl_lib, "ncclSend", &a.ncclSend, missing);
  sym(nccl_lib, "ncclRecv", &a.ncclRecv, missing);
  sym(nccl_lib, "ncclGroupStart", &a.ncclGroupStart, missing);
  sym(nccl_lib, "ncclGroupEnd", &a.ncclGroupEnd, missing);
  sym(nccl_lib, "ncclAllReduce", &a.ncclAllReduce, missing);
  sym(nccl_lib, "ncclReduce", &a.ncclReduce, missing);
  sym(nccl_lib, "ncclBroadcast", &a.ncclBroadcast, missing);
  sym(mp_lib, "cusolverMpCreate", &a.cusolverMpCreate, missing);
  sym(mp_lib, "cusolverMpDestroy", &a.cusolverMpDestroy, missing);
  sym(mp_lib, "cusolverMpSetStream", &a.cusolverMpSetStream, missing);
  sym(mp_lib, "cusolverMpGetVersion", &a.cusolverMpGetVersion, missing);
  sym(mp_lib, "cusolverMpCreateDeviceGrid", &a.cusolverMpCreateDeviceGrid, missing);
  sym(mp_lib, "cusolverMpDestroyGrid", &a.cusolverMpDestroyGrid, missing);
  sym(mp_lib, "cusolverMpCreateMatrixDesc", &a.cusolverMpCreateMatrixDesc, missing);
  sym(mp_lib, "cusolverMpDestroyMatrixDesc", &a.cusolverMpDestroyMatrixDesc, missing);
  sym(mp_lib, "cusolverMpPotrf_bufferSize", &a.cusolverMpPotrf_bufferSize, missing);
  sym(mp_lib, "cusolverMpPotrf", &a.cusolverMpPotrf, missing);
  sym(mp_lib, "cusolverMpPotrs_bufferSize", &a.cusolverMpPotrs_bufferSize, missing);
  sym(mp_lib, "cusolverMpPotrs", &a.cusolverMpPotrs, missing);
  sym(mp_lib, "cusolverMpGetrf_bufferSize", &a.cusolverMpGetrf_bufferSize, missing);
  sym(mp_lib, "cusolverMpGetrf", &a.cusolverMpGetrf, missing);
  sym(mp_lib, "cusolverMpGetrs_bufferSize", &a.cusolverMpGetrs_bufferSize, missing);
  sym(mp_lib, "cusolverMpGetrs", &a.cusolverMpGetrs, missing);
  sym(mp_lib, "cusolverMpGeqrf_bufferSize", &a.cusolverMpGeqrf_bufferSize, missing);
  sym(mp_lib, "cusolverMpGeqrf", &a.cusolverMpGeqrf, missing);
  sym(mp_lib, "cusolverMpOrgqr_bufferSize", &a.cusolverMpOrgqr_bufferSize, missing);
  sym(mp_lib, "cusolverMpOrgqr", &a.cusolverMpOrgqr, missing);
  sym(mp_lib, "cusolverMpSyevd_bufferSize", &a.cusolverMpSyevd_bufferSize, missing);
  sym(mp_lib, "cusolverMpSyevd", &a.cusolverMpSyevd, missing);
  sym(mp_lib, "cusolverMpSygvd_bufferSize", &a.cusolverMpSygvd_bufferSize, missing);
  sym(mp_lib, "cusolverMpSygvd", &a.cusolverMpSygvd, missing);
  // Optional: probe, never require.
  a.cusolverMpStedc_bufferSize =
      reinterpret_cast<cusolverMpStedc_bufferSize_fn>(dlsym(mp_lib, "cusolverMpStedc_bufferSize"));
  a.cusolverMpStedc = reinterpret_cast<cusolverMpStedc_fn>(dlsym(mp_lib, "cusolverMpStedc"));
  a.cusolverMpGesvd = dlsym(mp_lib, "cusolverMpGesvd");
  a.cusolverMpPolar = dlsym(mp_lib, "cusolverMpPolar");
  if (!a.cusolverMpPolar) a.cusolverMpPolar = dlsym(mp_lib, "cusolverMpPolarDecomposition");
}

// cuBLAS: already loaded (a dependency of cuSOLVERMp); found by its soname. a.blas says whether
// every entry point was found.
void resolve_cublas(Api& a) {
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
      a.cublas_path = name;
      break;
    }
  }
  if (!lib) {
    a.log.push_back("cuBLAS not loaded: potrs stays cuSOLVERMp's");
    return;
  }
  std::string missing;
  sym(lib, "cublasCreate_v2", &a.cublasCreate, &missing);
  sym(lib, "cublasDestroy_v2", &a.cublasDestroy, &missing);
  sym(lib, "cublasSetStream_v2", &a.cublasSetStream, &missing);
  sym(lib, "cublasStrsm_v2", &a.cublasStrsm, &missing);
  sym(lib, "cublasDtrsm_v2", &a.cublasDtrsm, &missing);
  sym(lib, "cublasCtrsm_v2", &a.cublasCtrsm, &missing);
  sym(lib, "cublasZtrsm_v2", &a.cublasZtrsm, &missing);
  sym(lib, "cublasSgemm_v2", &a.cublasSgemm, &missing);
  sym(lib, "cublasDgemm_v2", &a.cublasDgemm, &missing);
  sym(lib, "cublasCgemm_v2", &a.cublasCgemm, &missing);
  sym(lib, "cublasZgemm_v2", &a.cublasZgemm, &missing);
  sym(lib, "cublasStrmm_v2", &a.cublasStrmm, &missing);
  sym(lib, "cublasDtrmm_v2", &a.cublasDtrmm, &missing);
  sym(lib, "cublasCtrmm_v2", &a.cublasCtrmm, &missing);
  sym(lib, "cublasZtrmm_v2", &a.cublasZtrmm, &missing);
  sym(lib, "cublasSsyrk_v2", &a.cublasSsyrk, &missing);
  sym(lib, "cublasDsyrk_v2", &a.cublasDsyrk, &missing);
  sym(lib, "cublasCherk_v2", &a.cublasCherk, &missing);
  sym(lib, "cublasZherk_v2", &a.cublasZherk, &missing);
  a.blas = missing.empty();
  a.log.push_back(a.blas ? "cuBLAS entry points found in " + a.cublas_path : "cuBLAS lacks " + missing);
}

}  // namespace

bool load(const std::vector<std::string>& deps, const std::vector<std::string>& nccl,
          const std::vector<std::string>& cusolvermp) {
  std::lock_guard<std::mutex> lock(load_mutex());
  Api& a = api();
  if (a.loaded) return true;
  a.log.clear();
  open_dependencies(deps, a);
  void* nccl_lib = open_first(nccl, &a.nccl_path, &a.log);
  if (!nccl_lib) {
    a.error =
        "NCCL (libnccl.so.2) could not be loaded; install nvidia-nccl-cu13 (tried: " + std::to_string(nccl.size()) +
        " candidate paths)";
    return false;
  }
  void* mp_lib = open_first(cusolvermp, &a.cusolvermp_path, &a.log);
  if (!mp_lib) {
    std::string last = a.log.empty() ? "" : a.log.back();
    a.error =
        "cuSOLVERMp (libcusolverMp.so.0) could not be loaded; install nvidia-cusolvermp-cu13 "
        "(pip install nvidia-cusolvermp-cu13). Last attempt: " +
        last;
    return false;
  }
  std::string missing;
  resolve_required(nccl_lib, mp_lib, a, &missing);
  if (!missing.empty()) {
    a.error = "the loaded cuSOLVERMp/NCCL lack required entry points: " + missing;
    return false;
  }
  resolve_cublas(a);
  a.error.clear();
  a.loaded = true;
  return true;
}

void require_loaded() {
  if (!api().loaded) {
    throw std::runtime_error(api().error.empty() ? "cuSOLVERMp is not loaded; call jaxmg._native.load first"
                                                 : api().error);
  }
}

}  // namespace jaxmg
