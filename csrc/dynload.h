// Run-time loading of NCCL and cuSOLVERMp (dlopen/dlsym), so that jaxmg._native builds with headers
// only and imports without either library; a missing library becomes a clear error at call time.
#pragma once

#include <cusolverMp.h>
#include <nccl.h>

#include <string>
#include <vector>

namespace jaxmg {

using ncclGetUniqueId_fn = decltype(&::ncclGetUniqueId);
using ncclCommInitRank_fn = decltype(&::ncclCommInitRank);
using ncclCommDestroy_fn = decltype(&::ncclCommDestroy);
using ncclCommAbort_fn = decltype(&::ncclCommAbort);
using ncclCommGetAsyncError_fn = decltype(&::ncclCommGetAsyncError);
using ncclGetErrorString_fn = decltype(&::ncclGetErrorString);
using ncclGetVersion_fn = decltype(&::ncclGetVersion);
using ncclSend_fn = decltype(&::ncclSend);
using ncclRecv_fn = decltype(&::ncclRecv);
using ncclGroupStart_fn = decltype(&::ncclGroupStart);
using ncclGroupEnd_fn = decltype(&::ncclGroupEnd);
using ncclAllReduce_fn = decltype(&::ncclAllReduce);
using ncclReduce_fn = decltype(&::ncclReduce);
using ncclBroadcast_fn = decltype(&::ncclBroadcast);
using cusolverMpCreate_fn = decltype(&::cusolverMpCreate);
using cusolverMpDestroy_fn = decltype(&::cusolverMpDestroy);
using cusolverMpSetStream_fn = decltype(&::cusolverMpSetStream);
using cusolverMpGetVersion_fn = decltype(&::cusolverMpGetVersion);
using cusolverMpCreateDeviceGrid_fn = decltype(&::cusolverMpCreateDeviceGrid);
using cusolverMpDestroyGrid_fn = decltype(&::cusolverMpDestroyGrid);
using cusolverMpCreateMatrixDesc_fn = decltype(&::cusolverMpCreateMatrixDesc);
using cusolverMpDestroyMatrixDesc_fn = decltype(&::cusolverMpDestroyMatrixDesc);
using cusolverMpPotrf_bufferSize_fn = decltype(&::cusolverMpPotrf_bufferSize);
using cusolverMpPotrf_fn = decltype(&::cusolverMpPotrf);
using cusolverMpPotrs_bufferSize_fn = decltype(&::cusolverMpPotrs_bufferSize);
using cusolverMpPotrs_fn = decltype(&::cusolverMpPotrs);
using cusolverMpGetrf_bufferSize_fn = decltype(&::cusolverMpGetrf_bufferSize);
using cusolverMpGetrf_fn = decltype(&::cusolverMpGetrf);
using cusolverMpGetrs_bufferSize_fn = decltype(&::cusolverMpGetrs_bufferSize);
using cusolverMpGetrs_fn = decltype(&::cusolverMpGetrs);
using cusolverMpGeqrf_bufferSize_fn = decltype(&::cusolverMpGeqrf_bufferSize);
using cusolverMpGeqrf_fn = decltype(&::cusolverMpGeqrf);
using cusolverMpOrgqr_bufferSize_fn = decltype(&::cusolverMpOrgqr_bufferSize);
using cusolverMpOrgqr_fn = decltype(&::cusolverMpOrgqr);
using cusolverMpSyevd_bufferSize_fn = decltype(&::cusolverMpSyevd_bufferSize);
using cusolverMpSyevd_fn = decltype(&::cusolverMpSyevd);
using cusolverMpSygvd_bufferSize_fn = decltype(&::cusolverMpSygvd_bufferSize);
using cusolverMpSygvd_fn = decltype(&::cusolverMpSygvd);
using cusolverMpStedc_bufferSize_fn = decltype(&::cusolverMpStedc_bufferSize);
using cusolverMpStedc_fn = decltype(&::cusolverMpStedc);

// cuBLAS (loaded with cuSOLVERMp, which needs it): the tiled triangular solves of potrs, and
// the one-GPU products of the triangular inverses (gemm.cc).
using cublasCreate_fn = decltype(&::cublasCreate_v2);
using cublasDestroy_fn = decltype(&::cublasDestroy_v2);
using cublasSetStream_fn = decltype(&::cublasSetStream_v2);
using cublasStrsm_fn = decltype(&::cublasStrsm_v2);
using cublasDtrsm_fn = decltype(&::cublasDtrsm_v2);
using cublasCtrsm_fn = decltype(&::cublasCtrsm_v2);
using cublasZtrsm_fn = decltype(&::cublasZtrsm_v2);
using cublasSgemm_fn = decltype(&::cublasSgemm_v2);
using cublasDgemm_fn = decltype(&::cublasDgemm_v2);
using cublasCgemm_fn = decltype(&::cublasCgemm_v2);
using cublasZgemm_fn = decltype(&::cublasZgemm_v2);
using cublasStrmm_fn = decltype(&::cublasStrmm_v2);
using cublasDtrmm_fn = decltype(&::cublasDtrmm_v2);
using cublasCtrmm_fn = decltype(&::cublasCtrmm_v2);
using cublasZtrmm_fn = decltype(&::cublasZtrmm_v2);
using cublasSsyrk_fn = decltype(&::cublasSsyrk_v2);
using cublasDsyrk_fn = decltype(&::cublasDsyrk_v2);
using cublasCherk_fn = decltype(&::cublasCherk_v2);
using cublasZherk_fn = decltype(&::cublasZherk_v2);

// One function pointer per entry point we call; optional ones may stay null.
struct Api {
  // NCCL
  ncclGetUniqueId_fn ncclGetUniqueId = nullptr;
  ncclCommInitRank_fn ncclCommInitRank = nullptr;
  ncclCommDestroy_fn ncclCommDestroy = nullptr;
  ncclCommAbort_fn ncclCommAbort = nullptr;  // the watchdog's (watchdog.h)
  ncclCommGetAsyncError_fn ncclCommGetAsyncError = nullptr;
  ncclGetErrorString_fn ncclGetErrorString = nullptr;
  ncclGetVersion_fn ncclGetVersion = nullptr;
  ncclSend_fn ncclSend = nullptr;
  ncclRecv_fn ncclRecv = nullptr;
  ncclGroupStart_fn ncclGroupStart = nullptr;
  ncclGroupEnd_fn ncclGroupEnd = nullptr;
  ncclAllReduce_fn ncclAllReduce = nullptr;
  ncclReduce_fn ncclReduce = nullptr;
  ncclBroadcast_fn ncclBroadcast = nullptr;
  // cuSOLVERMp (required)
  cusolverMpCreate_fn cusolverMpCreate = nullptr;
  cusolverMpDestroy_fn cusolverMpDestroy = nullptr;
  cusolverMpSetStream_fn cusolverMpSetStream = nullptr;
  cusolverMpGetVersion_fn cusolverMpGetVersion = nullptr;
  cusolverMpCreateDeviceGrid_fn cusolverMpCreateDeviceGrid = nullptr;
  cusolverMpDestroyGrid_fn cusolverMpDestroyGrid = nullptr;
  cusolverMpCreateMatrixDesc_fn cusolverMpCreateMatrixDesc = nullptr;
  cusolverMpDestroyMatrixDesc_fn cusolverMpDestroyMatrixDesc = nullptr;
  cusolverMpPotrf_bufferSize_fn cusolverMpPotrf_bufferSize = nullptr;
  cusolverMpPotrf_fn cusolverMpPotrf = nullptr;
  cusolverMpPotrs_bufferSize_fn cusolverMpPotrs_bufferSize = nullptr;
  cusolverMpPotrs_fn cusolverMpPotrs = nullptr;
  cusolverMpGetrf_bufferSize_fn cusolverMpGetrf_bufferSize = nullptr;
  cusolverMpGetrf_fn cusolverMpGetrf = nullptr;
  cusolverMpGetrs_bufferSize_fn cusolverMpGetrs_bufferSize = nullptr;
  cusolverMpGetrs_fn cusolverMpGetrs = nullptr;
  cusolverMpGeqrf_bufferSize_fn cusolverMpGeqrf_bufferSize = nullptr;
  cusolverMpGeqrf_fn cusolverMpGeqrf = nullptr;
  cusolverMpOrgqr_bufferSize_fn cusolverMpOrgqr_bufferSize = nullptr;
  cusolverMpOrgqr_fn cusolverMpOrgqr = nullptr;
  cusolverMpSyevd_bufferSize_fn cusolverMpSyevd_bufferSize = nullptr;
  cusolverMpSyevd_fn cusolverMpSyevd = nullptr;
  cusolverMpSygvd_bufferSize_fn cusolverMpSygvd_bufferSize = nullptr;
  cusolverMpSygvd_fn cusolverMpSygvd = nullptr;
  // Optional entry points, probed: the tridiagonal divide and conquer (band.cc's stedc, on one GPU);
  cusolverMpStedc_bufferSize_fn cusolverMpStedc_bufferSize = nullptr;
  cusolverMpStedc_fn cusolverMpStedc = nullptr;
  // present in cuSOLVERMp 0.9+, absent in 0.8.
  void* cusolverMpGesvd = nullptr;
  void* cusolverMpPolar = nullptr;
  // cuBLAS (optional: without it, potrs is cuSOLVERMp's own).
  cublasCreate_fn cublasCreate = nullptr;
  cublasDestroy_fn cublasDestroy = nullptr;
  cublasSetStream_fn cublasSetStream = nullptr;
  cublasStrsm_fn cublasStrsm = nullptr;
  cublasDtrsm_fn cublasDtrsm = nullptr;
  cublasCtrsm_fn cublasCtrsm = nullptr;
  cublasZtrsm_fn cublasZtrsm = nullptr;
  cublasSgemm_fn cublasSgemm = nullptr;
  cublasDgemm_fn cublasDgemm = nullptr;
  cublasCgemm_fn cublasCgemm = nullptr;
  cublasZgemm_fn cublasZgemm = nullptr;
  cublasStrmm_fn cublasStrmm = nullptr;
  cublasDtrmm_fn cublasDtrmm = nullptr;
  cublasCtrmm_fn cublasCtrmm = nullptr;
  cublasZtrmm_fn cublasZtrmm = nullptr;
  cublasSsyrk_fn cublasSsyrk = nullptr;
  cublasDsyrk_fn cublasDsyrk = nullptr;
  cublasCherk_fn cublasCherk = nullptr;
  cublasZherk_fn cublasZherk = nullptr;
  bool blas = false;  // every cuBLAS entry point above was found
  std::string cublas_path;

  bool loaded = false;
  std::string error;            // why loading failed (empty when loaded)
  std::string cusolvermp_path;  // the file that was loaded
  std::string nccl_path;
  std::vector<std::string> log;  // what was tried
};

// The process-wide table (never null).
Api& api();

// Load the dependencies (each tried in order, RTLD_GLOBAL, failures only logged), then NCCL from
// the first candidate that loads, then cuSOLVERMp likewise. Returns true when every required
// symbol was found; idempotent once it succeeded.
bool load(const std::vector<std::string>& deps, const std::vector<std::string>& nccl,
          const std::vector<std::string>& cusolvermp);

// Throws std::runtime_error with api().error when not loaded.
void require_loaded();

}  // namespace jaxmg
