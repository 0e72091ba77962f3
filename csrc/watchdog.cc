#include "watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "grid.h"

namespace jaxmg {

using Clock = std::chrono::steady_clock;

// One watched call: its context, when it started, and (once the handler has returned) the event
// that completes with its GPU work.
struct WatchEntry {
  Context* ctx = nullptr;
  int device = -1;
  Clock::time_point start;
  cudaEvent_t done = nullptr;  // set by ~Watch; owned by the watchdog from then on
};

namespace {

constexpr auto kPollEvery = std::chrono::milliseconds(5);

struct Watchdog {
  std::mutex mu;
  std::condition_variable wake;
  std::vector<std::shared_ptr<WatchEntry>> entries;
  std::vector<Context*> known;  // every context ever watched (for request_abort)
  std::string requested;        // a pending abort request
  std::string history;          // every abort so far
  bool started = false;
};

Watchdog& dog() {
  static Watchdog* d = new Watchdog();  // never destroyed, like the grid cache
  return *d;
}

std::string nccl_error_name(ncclResult_t r) {
  const char* s = api().ncclGetErrorString ? api().ncclGetErrorString(r) : nullptr;
  return cat("NCCL error ", (int)r, s ? cat(" (", s, ")") : std::string());
}

// Aborts ctx's communicator once (d.mu held).
void abort_locked(Watchdog& d, Context* ctx, const std::string& reason) {
  if (ctx->comm_aborted || !ctx->comm) return;
  ctx->aborted = reason;
  std::string line = cat("rank ", ctx->rank, " of ", ctx->nranks, " on device ", ctx->device, ": ", reason);
  d.history += (d.history.empty() ? "" : "; ") + line;
  std::fprintf(stderr, "[jaxmg native] aborting the grid's NCCL communicator: %s\n", line.c_str());
  std::fflush(stderr);
  ctx->comm_aborted = true;  // handlers check it; the communicator is never destroyed
  if (api().ncclCommAbort) api().ncclCommAbort(ctx->comm);
}

void poll_once(Watchdog& d) {
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.requested.empty()) {
    for (Context* ctx : d.known) abort_locked(d, ctx, d.requested);
    d.requested.clear();
  }
  const double limit = native_timeout_s();
  const auto now = Clock::now();
  auto finished = [&](const std::shared_ptr<WatchEntry>& e) {
    if (e->done) {
      cudaSetDevice(e->device);
      cudaError_t q = cudaEventQuery(e->done);
      if (q != cudaErrorNotReady) {
        cudaEventDestroy(e->done);
        return true;
      }
    }
    Context* ctx = e->ctx;
    if (ctx->comm_aborted) return false;  // wait for the aborted GPU work to drain
    ncclResult_t async = ncclSuccess;
    if (api().ncclCommGetAsyncError && api().ncclCommGetAsyncError(ctx->comm, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress)
      abort_locked(d, ctx, cat("NCCL reported an asynchronous error, ", nccl_error_name(async),
                               " (a peer process may have died)"));
    else if (limit > 0 && std::chrono::duration<double>(now - e->start).count() > limit)
      abort_locked(d, ctx, cat("a native call has not finished after ", limit,
                               " s (JAXMG_NATIVE_TIMEOUT): a peer process has probably died or stopped"));
    return false;
  };
  d.entries.erase(std::remove_if(d.entries.begin(), d.entries.end(), finished), d.entries.end());
}

void run(Watchdog& d) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(d.mu);
      d.wake.wait(lock, [&] { return !d.entries.empty() || !d.requested.empty(); });
    }
    poll_once(d);
    std::this_thread::sleep_for(kPollEvery);
  }
}

}  // namespace

double native_timeout_s() {
  static const double seconds = [] {
    const char* v = std::getenv("JAXMG_NATIVE_TIMEOUT");
    return v && *v ? std::max(0.0, std::atof(v)) : 0.0;
  }();
  return seconds;
}

Watch::Watch(Context* ctx, cudaStream_t stream) : entry_(std::make_shared<WatchEntry>()), stream_(stream) {
  entry_->ctx = ctx;
  entry_->device = ctx->device;
  entry_->start = Clock::now();
  Watchdog& d = dog();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.started) {
    std::thread([&d] { run(d); }).detach();
    d.started = true;
  }
  if (std::find(d.known.begin(), d.known.end(), ctx) == d.known.end()) d.known.push_back(ctx);
  d.entries.push_back(entry_);
  d.wake.notify_one();
}

Watch::~Watch() {
  cudaEvent_t ev = nullptr;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(ev, stream_) != cudaSuccess) {
    if (ev) cudaEventDestroy(ev);
    ev = nullptr;
  }
  Watchdog& d = dog();
  std::lock_guard<std::mutex> lock(d.mu);
  if (ev) {
    entry_->done = ev;  // the watchdog drops the entry when the event completes
  } else {
    d.entries.erase(std::remove(d.entries.begin(), d.entries.end(), entry_), d.entries.end());
  }
}

void request_abort(const std::string& reason) {
  Watchdog& d = dog();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.requested = reason.empty() ? std::string("abort requested") : reason;
  }
  poll_once(d);  // at once, also where no call is in flight
}

std::string abort_reason(const Context& ctx) {
  std::lock_guard<std::mutex> lock(dog().mu);
  return ctx.aborted;
}

std::string aborts_so_far() {
  std::lock_guard<std::mutex> lock(dog().mu);
  return dog().history;
}

}  // namespace jaxmg
