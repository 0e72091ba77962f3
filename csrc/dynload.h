// Run-time loading of NCCL and cuSOLVERMp (dlopen/dlsym), so that jaxmg._native builds with headers
// only and imports without either library; a missing library becomes a clear error at call time.
#pragma once

#include <cusolverMp.h>
#include <nccl.h>

#include <string>
#include <vector>

namespace jaxmg {

// One function pointer per entry point we call; optional ones may stay null.
struct Api {
  // NCCL
  decltype(&ncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&ncclCommInitRank) ncclCommInitRank = nullptr;
  decltype(&ncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&ncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&ncclGetVersion) ncclGetVersion = nullptr;
  // cuSOLVERMp (required)
  decltype(&cusolverMpCreate) cusolverMpCreate = nullptr;
  decltype(&cusolverMpDestroy) cusolverMpDestroy = nullptr;
  decltype(&cusolverMpSetStream) cusolverMpSetStream = nullptr;
  decltype(&cusolverMpGetVersion) cusolverMpGetVersion = nullptr;
  decltype(&cusolverMpCreateDeviceGrid) cusolverMpCreateDeviceGrid = nullptr;
  decltype(&cusolverMpDestroyGrid) cusolverMpDestroyGrid = nullptr;
  decltype(&cusolverMpCreateMatrixDesc) cusolverMpCreateMatrixDesc = nullptr;
  decltype(&cusolverMpDestroyMatrixDesc) cusolverMpDestroyMatrixDesc = nullptr;
  decltype(&cusolverMpPotrf_bufferSize) cusolverMpPotrf_bufferSize = nullptr;
  decltype(&cusolverMpPotrf) cusolverMpPotrf = nullptr;
  decltype(&cusolverMpPotrs_bufferSize) cusolverMpPotrs_bufferSize = nullptr;
  decltype(&cusolverMpPotrs) cusolverMpPotrs = nullptr;
  // Optional entry points, probed: present in cuSOLVERMp 0.9+, absent in 0.8.
  void* cusolverMpGesvd = nullptr;
  void* cusolverMpPolar = nullptr;

  bool loaded = false;
  std::string error;             // why loading failed (empty when loaded)
  std::string cusolvermp_path;   // the file that was loaded
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
