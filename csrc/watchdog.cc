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

#include "dynload.h"
#include "strcat.h"

namespace jaxmg {

using Clock = std::chrono::steady_clock;

// One watched call: its context (held until the entry is dropped), when it started, and (once the
// handler has returned) the event that completes with its GPU work.
struct WatchEntry {
  std::shared_ptr<Watched> ctx;
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
  std::vector<std::weak_ptr<Watched>> known;  // every context watched, while it exists (request_abort)
  std::string requested;                      // a pending abort request
  std::string history;                        // every abort so far
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
void abort_locked(Watchdog& d, Watched* ctx, const std::string& reason) {
  if (ctx->comm_aborted || !ctx->comm) return;
  ctx->aborted = reason;
  std::string line = cat("rank ", ctx->rank, " of ", ctx->nranks, " on device ", ctx->device, ": ", reason);
  d.history += (d.history.empty() ? "" : "; ") + line;
  std::fprintf(stderr, "[jaxmg native] aborting the grid's NCCL communicator: %s\n", line.c_str());
  std::fflush(stderr);
  ctx->comm_aborted = true;  // handlers check it; the communicator is never destroyed
  if (api().ncclCommAbort) api().ncclCommAbort(ctx->comm);
}

// Whether entry e's GPU work has completed (its event is then destroyed); otherwise, aborts its
// communicator on an asynchronous NCCL error or past the time limit (d.mu held).
bool finished(Watchdog& d, WatchEntry& e, double limit, Clock::time_point now) {
  if (e.done) {
    cudaSetDevice(e.device);
    cudaError_t q = cudaEventQuery(e.done);
    if (q != cudaErrorNotReady) {
      cudaEventDestroy(e.done);
      return true;
    }
  }
  Watched* ctx = e.ctx.get();
  if (ctx->comm_aborted) return false;  // wait for the aborted GPU work to drain
  ncclResult_t async = ncclSuccess;
  if (api().ncclCommGetAsyncError && api().ncclCommGetAsyncError(ctx->comm, &async) == ncclSuccess &&
      async != ncclSuccess && async != ncclInProgress)
    abort_locked(
        d, ctx,
        cat("NCCL reported an asynchronous error, ", nccl_error_name(async), " (a peer process may have died)"));
  else if (limit > 0 && std::chrono::duration<double>(now - e.start).count() > limit)
    abort_locked(d, ctx,
                 cat("a native call has not finished after ", limit,
                     " s (JAXMG_NATIVE_TIMEOUT): a peer process has probably died or stopped"));
  return false;
}

void poll_once(Watchdog& d) {
  // References dropped here are released after the lock: one may be a context's last.
  std::vector<std::shared_ptr<Watched>> aborted;
  std::vector<std::shared_ptr<WatchEntry>> done;
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.requested.empty()) {
    for (const auto& known : d.known)
      if (auto ctx = known.lock()) {
        abort_locked(d, ctx.get(), d.requested);
        aborted.push_back(std::move(ctx));
      }
    d.requested.clear();
  }
  const double limit = native_timeout_s();
  const auto now = Clock::now();
  std::vector<std::shared_ptr<WatchEntry>> running;
  for (auto& e : d.entries) (finished(d, *e, limit, now) ? done : running).push_back(std::move(e));
  d.entries.swap(running);
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

Watch::Watch(std::shared_ptr<Watched> ctx, cudaStream_t stream)
    : entry_(std::make_shared<WatchEntry>()), stream_(stream) {
  entry_->device = ctx->device;
  entry_->start = Clock::now();
  Watchdog& d = dog();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.started) {
    std::thread([&d] { run(d); }).detach();
    d.started = true;
  }
  auto gone_or_same = [&](const std::weak_ptr<Watched>& w) {
    return w.expired() || (!w.owner_before(ctx) && !ctx.owner_before(w));
  };
  d.known.erase(std::remove_if(d.known.begin(), d.known.end(), gone_or_same), d.known.end());
  d.known.push_back(ctx);
  entry_->ctx = std::move(ctx);
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

std::string abort_reason(const Watched& ctx) {
  std::lock_guard<std::mutex> lock(dog().mu);
  return ctx.aborted;
}

std::string aborts_so_far() {
  std::lock_guard<std::mutex> lock(dog().mu);
  return dog().history;
}

}  // namespace jaxmg
