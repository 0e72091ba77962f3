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

}  // namespace

bool load(const std::vector<std::string>& deps, const std::vector<std::string>& nccl,
          const std::vector<std::string>& cusolvermp) {
  std::lock_guard<std::mutex> lock(load_mutex());
  Api& a = api();
  if (a.loaded) return true;
  a.log.clear();
  for (const auto& d : deps) {
    if (dlopen(d.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      a.log.push_back("loaded " + d);
    } else {
      const char* e = dlerror();
      a.log.push_back("cannot load dependency " + d + ": " + (e ? e : "?"));
    }
  }
  void* nccl_lib = open_first(nccl, &a.nccl_path, &a.log);
  if (!nccl_lib) {
    a.error = "NCCL (libnccl.so.2) could not be loaded; install nvidia-nccl-cu13 (tried: " +
              std::to_string(nccl.size()) + " candidate paths)";
    return false;
  }
  void* mp_lib = open_first(cusolvermp, &a.cusolvermp_path, &a.log);
  if (!mp_lib) {
    std::string last = a.log.empty() ? "" : a.log.back();
    a.error = "cuSOLVERMp (libcusolverMp.so.0) could not be loaded; install nvidia-cusolvermp-cu13 "
              "(pip install nvidia-cusolvermp-cu13). Last attempt: " + last;
    return false;
  }
  std::string missing;
  sym(nccl_lib, "ncclGetUniqueId", &a.ncclGetUniqueId, &missing);
  sym(nccl_lib, "ncclCommInitRank", &a.ncclCommInitRank, &missing);
  sym(nccl_lib, "ncclCommDestroy", &a.ncclCommDestroy, &missing);
  sym(nccl_lib, "ncclCommAbort", &a.ncclCommAbort, &missing);
  sym(nccl_lib, "ncclCommGetAsyncError", &a.ncclCommGetAsyncError, &missing);
  sym(nccl_lib, "ncclGetErrorString", &a.ncclGetErrorString, &missing);
  sym(nccl_lib, "ncclGetVersion", &a.ncclGetVersion, &missing);
  sym(nccl_lib, "ncclSend", &a.ncclSend, &missing);
  sym(nccl_lib, "ncclRecv", &a.ncclRecv, &missing);
  sym(nccl_lib, "ncclGroupStart", &a.ncclGroupStart, &missing);
  sym(nccl_lib, "ncclGroupEnd", &a.ncclGroupEnd, &missing);
  sym(nccl_lib, "ncclAllReduce", &a.ncclAllReduce, &missing);
  sym(nccl_lib, "ncclReduce", &a.ncclReduce, &missing);
  sym(nccl_lib, "ncclBroadcast", &a.ncclBroadcast, &missing);
  sym(mp_lib, "cusolverMpCreate", &a.cusolverMpCreate, &missing);
  sym(mp_lib, "cusolverMpDestroy", &a.cusolverMpDestroy, &missing);
  sym(mp_lib, "cusolverMpSetStream", &a.cusolverMpSetStream, &missing);
  sym(mp_lib, "cusolverMpGetVersion", &a.cusolverMpGetVersion, &missing);
  sym(mp_lib, "cusolverMpCreateDeviceGrid", &a.cusolverMpCreateDeviceGrid, &missing);
  sym(mp_lib, "cusolverMpDestroyGrid", &a.cusolverMpDestroyGrid, &missing);
  sym(mp_lib, "cusolverMpCreateMatrixDesc", &a.cusolverMpCreateMatrixDesc, &missing);
  sym(mp_lib, "cusolverMpDestroyMatrixDesc", &a.cusolverMpDestroyMatrixDesc, &missing);
  sym(mp_lib, "cusolverMpPotrf_bufferSize", &a.cusolverMpPotrf_bufferSize, &missing);
  sym(mp_lib, "cusolverMpPotrf", &a.cusolverMpPotrf, &missing);
  sym(mp_lib, "cusolverMpPotrs_bufferSize", &a.cusolverMpPotrs_bufferSize, &missing);
  sym(mp_lib, "cusolverMpPotrs", &a.cusolverMpPotrs, &missing);
  sym(mp_lib, "cusolverMpGetrf_bufferSize", &a.cusolverMpGetrf_bufferSize, &missing);
  sym(mp_lib, "cusolverMpGetrf", &a.cusolverMpGetrf, &missing);
  sym(mp_lib, "cusolverMpGetrs_bufferSize", &a.cusolverMpGetrs_bufferSize, &missing);
  sym(mp_lib, "cusolverMpGetrs", &a.cusolverMpGetrs, &missing);
  sym(mp_lib, "cusolverMpGeqrf_bufferSize", &a.cusolverMpGeqrf_bufferSize, &missing);
  sym(mp_lib, "cusolverMpGeqrf", &a.cusolverMpGeqrf, &missing);
  sym(mp_lib, "cusolverMpOrmqr_bufferSize", &a.cusolverMpOrmqr_bufferSize, &missing);
  sym(mp_lib, "cusolverMpOrmqr", &a.cusolverMpOrmqr, &missing);
  sym(mp_lib, "cusolverMpOrgqr_bufferSize", &a.cusolverMpOrgqr_bufferSize, &missing);
  sym(mp_lib, "cusolverMpOrgqr", &a.cusolverMpOrgqr, &missing);
  sym(mp_lib, "cusolverMpSyevd_bufferSize", &a.cusolverMpSyevd_bufferSize, &missing);
  sym(mp_lib, "cusolverMpSyevd", &a.cusolverMpSyevd, &missing);
  sym(mp_lib, "cusolverMpSygvd_bufferSize", &a.cusolverMpSygvd_bufferSize, &missing);
  sym(mp_lib, "cusolverMpSygvd", &a.cusolverMpSygvd, &missing);
  if (!missing.empty()) {
    a.error = "the loaded cuSOLVERMp/NCCL lack required entry points: " + missing;
    return false;
  }
  // Optional (0.9+): probe, never require.
  a.cusolverMpGesvd = dlsym(mp_lib, "cusolverMpGesvd");
  a.cusolverMpPolar = dlsym(mp_lib, "cusolverMpPolar");
  if (!a.cusolverMpPolar) a.cusolverMpPolar = dlsym(mp_lib, "cusolverMpPolarDecomposition");
  // cuBLAS: already loaded (a dependency of cuSOLVERMp); found by its soname.
  void* blas_lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
    blas_lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (blas_lib) {
      a.cublas_path = name;
      break;
    }
  }
  if (blas_lib) {
    std::string blas_missing;
    sym(blas_lib, "cublasCreate_v2", &a.cublasCreate, &blas_missing);
    sym(blas_lib, "cublasDestroy_v2", &a.cublasDestroy, &blas_missing);
    sym(blas_lib, "cublasSetStream_v2", &a.cublasSetStream, &blas_missing);
    sym(blas_lib, "cublasStrsm_v2", &a.cublasStrsm, &blas_missing);
    sym(blas_lib, "cublasDtrsm_v2", &a.cublasDtrsm, &blas_missing);
    sym(blas_lib, "cublasCtrsm_v2", &a.cublasCtrsm, &blas_missing);
    sym(blas_lib, "cublasZtrsm_v2", &a.cublasZtrsm, &blas_missing);
    sym(blas_lib, "cublasSgemm_v2", &a.cublasSgemm, &blas_missing);
    sym(blas_lib, "cublasDgemm_v2", &a.cublasDgemm, &blas_missing);
    sym(blas_lib, "cublasCgemm_v2", &a.cublasCgemm, &blas_missing);
    sym(blas_lib, "cublasZgemm_v2", &a.cublasZgemm, &blas_missing);
    sym(blas_lib, "cublasStrmm_v2", &a.cublasStrmm, &blas_missing);
    sym(blas_lib, "cublasDtrmm_v2", &a.cublasDtrmm, &blas_missing);
    sym(blas_lib, "cublasCtrmm_v2", &a.cublasCtrmm, &blas_missing);
    sym(blas_lib, "cublasZtrmm_v2", &a.cublasZtrmm, &blas_missing);
    sym(blas_lib, "cublasSsyrk_v2", &a.cublasSsyrk, &blas_missing);
    sym(blas_lib, "cublasDsyrk_v2", &a.cublasDsyrk, &blas_missing);
    sym(blas_lib, "cublasCherk_v2", &a.cublasCherk, &blas_missing);
    sym(blas_lib, "cublasZherk_v2", &a.cublasZherk, &blas_missing);
    a.blas = blas_missing.empty();
    a.log.push_back(a.blas ? "cuBLAS entry points found in " + a.cublas_path : "cuBLAS lacks " + blas_missing);
  } else {
    a.log.push_back("cuBLAS not loaded: potrs stays cuSOLVERMp's");
  }
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
