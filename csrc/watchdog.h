// The communicator watchdog: no native call waits on its peers forever.
//
// From the start of a handler until the GPU work it enqueued has completed, the grid's NCCL
// communicator is watched by one background thread, every few milliseconds, for
//   - NCCL's asynchronous error (ncclCommGetAsyncError: a peer's connection lost, ...);
//   - a time limit, JAXMG_NATIVE_TIMEOUT seconds (unset or 0: none; read once);
//   - an abort request (request_abort, jaxmg.kernels.native.abort_communicators in Python).
// On any of them the communicator is aborted (ncclCommAbort), which ends the GPU work blocked in
// it; the handler that was waiting, and every later call on that grid, then fails with the reason
// (an aborted communicator cannot be used again: restart the processes).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <string>

namespace jaxmg {

struct WatchEntry;

// What the watchdog reads and writes of a grid's context: its communicator and where it runs, and
// once aborted, why. The grid's Context (grid.h) is one.
struct Watched {
  int device = -1;
  int nranks = 0, rank = 0;
  ncclComm_t comm = nullptr;
  std::string aborted;                    // why the watchdog aborted comm (under its lock)
  std::atomic<bool> comm_aborted{false};  // comm was aborted: unusable
};

// Watches `ctx`'s communicator while it lives and, after it ends, until the work enqueued on
// `stream` up to its end has completed; holds `ctx` as long.
class Watch {
 public:
  Watch(std::shared_ptr<Watched> ctx, cudaStream_t stream);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

 private:
  std::shared_ptr<WatchEntry> entry_;
  cudaStream_t stream_;
};

// Aborts the communicators of every grid ever watched that still exists (cached or in use) with
// `reason`.
void request_abort(const std::string& reason);

// Why `ctx`'s communicator was aborted, or "" while it is usable.
std::string abort_reason(const Watched& ctx);

// Every abort so far, joined ("" when none): failures are reported with it.
std::string aborts_so_far();

// JAXMG_NATIVE_TIMEOUT in seconds (0: no limit).
double native_timeout_s();

}  // namespace jaxmg
