// The engine's own speed: cuSOLVERMp driven from C++ with no JAX, one process per GPU.
//
// Times potrf, getrf+getrs, geqrf and syevd, and what jaxmg's LU, QR and eigensolver families are
// compared against: tall M x N matrices, geqrf + orgqr (the explicit Q that
// jaxmg.qr returns), geqrf + ormqr (Q^H b of least squares), gels, and either rank mapping of the
// process grid. Every phase is timed on its own, so a run reports, for example, geqrf and orgqr
// separately as well as their sum.
//
//   engine_ops RANK NRANKS IDFILE NPROW M N T DTYPE REPS OP [MAPPING]
//     DTYPE: d (float64) or s (float32); OP: potrf | getrf | geqrf | qr | lstsq | gels | syevd;
//     MAPPING: col (default, cuSOLVERMp's column-major rank mapping) or row.
//   One JSON line from rank 0: op, m, n, T, grid, mapping, dtype, median_s (the whole op), the
//   median of each phase (phases_s), init_s (communicator, handle, grid), info, work_mib, and
//   rss_growth_kib_per_rep (host memory gained per timed run after the warm-up: a leak shows here).
//   QUERY_EACH_REP=1 also queries getrf's workspace size before each getrf, as jaxmg's handler does.
// Run it through engine_ops.sh beside it. Matrix: a_ij = 1 / (1 + |i - j|) + s delta_ij with
// s = N for potrf/getrf/syevd (well conditioned, SPD) and s = 2 otherwise.
#include <cuda_runtime.h>
#include <cusolverMp.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                     \
  do {                                                                            \
    auto _s = (x);                                                                \
    if ((int)_s != 0) {                                                           \
      std::fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)_s); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;

template <typename T>
__global__ void fill(T* a, int64_t mloc, int64_t nloc, int64_t lld, int64_t nb, int myprow, int nprow,
                     int mypcol, int npcol, double shift) {
  int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (idx >= mloc * nloc) return;
  int64_t li = idx % mloc, lj = idx / mloc;
  int64_t gi = ((li / nb) * nprow + myprow) * nb + li % nb;
  int64_t gj = ((lj / nb) * npcol + mypcol) * nb + lj % nb;
  double d = gi > gj ? gi - gj : gj - gi;
  a[li + lj * lld] = (T)(1.0 / (1.0 + d) + (gi == gj ? shift : 0.0));
}

ncclUniqueId exchange_id(int rank, const std::string& idfile) {
  ncclUniqueId id;
  if (rank == 0) {
    CK(ncclGetUniqueId(&id));
    std::string tmp = idfile + ".tmp";
    std::ofstream(tmp, std::ios::binary).write((const char*)&id, sizeof id);
    std::rename(tmp.c_str(), idfile.c_str());
    return id;
  }
  for (;;) {
    std::ifstream f(idfile, std::ios::binary);
    if (f && f.read((char*)&id, sizeof id)) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// One distributed matrix: its descriptor and local column-major block.
template <typename T>
struct Dist {
  int64_t m = 0, n = 0, mloc = 0, nloc = 0, lld = 1;
  cusolverMpMatrixDescriptor_t desc = nullptr;
  T* data = nullptr;
  Dist(cusolverMpGrid_t grid, cudaDataType_t dt, int64_t m_, int64_t n_, int64_t nb, int myprow, int nprow,
       int mypcol, int npcol)
      : m(m_), n(n_) {
    mloc = cusolverMpNUMROC(m, nb, myprow, 0, nprow);
    nloc = cusolverMpNUMROC(n, nb, mypcol, 0, npcol);
    lld = std::max<int64_t>(mloc, 1);
    CK(cusolverMpCreateMatrixDesc(&desc, grid, dt, m, n, nb, nb, 0, 0, lld));
    CK(cudaMalloc(&data, sizeof(T) * std::max<int64_t>(lld * nloc, 1)));
  }
};

struct Workspace {
  size_t dev = 0, host = 0;
  void grow(size_t d, size_t h) { dev = std::max(dev, d); host = std::max(host, h); }
};

// The resident set size of this process in KiB (VmRSS of /proc/self/status), or -1.
long rss_kib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

template <typename T>
int run(int rank, int nranks, const std::string& idfile, int nprow, int64_t m, int64_t n, int64_t nb, int reps,
        cudaDataType_t dt, const std::string& op, bool row_major) {
  const int npcol = nranks / nprow;
  CK(cudaSetDevice(rank));
  ncclUniqueId id = exchange_id(rank, idfile);
  auto t_init0 = Clock::now();
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cusolverMpHandle_t h;
  CK(cusolverMpCreate(&h, rank, s));
  cusolverMpGrid_t grid;
  CK(cusolverMpCreateDeviceGrid(h, &grid, comm, nprow, npcol,
                                row_major ? CUSOLVERMP_GRID_MAPPING_ROW_MAJOR : CUSOLVERMP_GRID_MAPPING_COL_MAJOR));
  const int myprow = row_major ? rank / npcol : rank % nprow;
  const int mypcol = row_major ? rank % npcol : rank / nprow;
  const bool square_op = op == "potrf" || op == "getrf" || op == "syevd";
  if (square_op) m = n;
  Dist<T> a(grid, dt, m, n, nb, myprow, nprow, mypcol, npcol);
  Dist<T> b(grid, dt, m, 1, nb, myprow, nprow, mypcol, npcol);  // one right-hand side
  Dist<T> z(grid, dt, op == "syevd" ? n : 1, op == "syevd" ? n : 1, nb, myprow, nprow, mypcol, npcol);
  int64_t* ipiv;
  T *tau, *w;
  CK(cudaMalloc(&ipiv, sizeof(int64_t) * (a.mloc + nb)));
  CK(cudaMalloc(&tau, sizeof(T) * (a.nloc + nb)));
  CK(cudaMalloc(&w, sizeof(T) * n));
  char compz[] = "V";
  const cublasOperation_t adjoint = CUBLAS_OP_T;  // real dtypes: Q^T = Q^H
  Workspace ws;
  size_t d = 0, hb = 0;
  if (op == "potrf") {
    CK(cusolverMpPotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, a.data, 1, 1, a.desc, dt, &d, &hb)); ws.grow(d, hb);
  } else if (op == "getrf") {
    CK(cusolverMpGetrf_bufferSize(h, n, n, a.data, 1, 1, a.desc, ipiv, dt, &d, &hb)); ws.grow(d, hb);
    CK(cusolverMpGetrs_bufferSize(h, CUBLAS_OP_N, n, 1, a.data, 1, 1, a.desc, ipiv, b.data, 1, 1, b.desc, dt, &d, &hb));
    ws.grow(d, hb);
  } else if (op == "geqrf" || op == "qr" || op == "lstsq") {
    CK(cusolverMpGeqrf_bufferSize(h, m, n, a.data, 1, 1, a.desc, dt, &d, &hb)); ws.grow(d, hb);
    if (op == "qr") {
      CK(cusolverMpOrgqr_bufferSize(h, m, n, n, a.data, 1, 1, a.desc, tau, dt, &d, &hb)); ws.grow(d, hb);
    }
    if (op == "lstsq") {
      CK(cusolverMpOrmqr_bufferSize(h, CUBLAS_SIDE_LEFT, adjoint, m, 1, n, a.data, 1, 1, a.desc, tau, b.data, 1, 1,
                                    b.desc, dt, &d, &hb));
      ws.grow(d, hb);
    }
  } else if (op == "gels") {
    CK(cusolverMpGels_bufferSize(h, CUBLAS_OP_N, m, n, 1, a.data, 1, 1, a.desc, b.data, 1, 1, b.desc, dt, &d, &hb));
    ws.grow(d, hb);
  } else if (op == "syevd") {
    CK(cusolverMpSyevd_bufferSize(h, compz, CUBLAS_FILL_MODE_LOWER, n, a.data, 1, 1, a.desc, w, z.data, 1, 1, z.desc,
                                  dt, &d, &hb));
    ws.grow(d, hb);
  } else {
    std::fprintf(stderr, "unknown op %s\n", op.c_str());
    return 2;
  }
  void* dwork;
  CK(cudaMalloc(&dwork, std::max<size_t>(ws.dev, 1)));
  std::vector<char> hwork(std::max<size_t>(ws.host, 1));
  int* info;
  CK(cudaMalloc(&info, sizeof(int)));
  double* flag;
  CK(cudaMalloc(&flag, sizeof(double)));
  CK(cudaStreamSynchronize(s));
  const double init_s = std::chrono::duration<double>(Clock::now() - t_init0).count();

  std::map<std::string, std::vector<double>> phases;
  std::vector<double> totals;
  const double shift = square_op ? (double)n : 2.0;
  long rss_after_warmup = -1;
  const bool query_each_rep = std::getenv("QUERY_EACH_REP") && std::atoi(std::getenv("QUERY_EACH_REP")) != 0;
  for (int r = 0; r < reps + 1; ++r) {
    if (r == 1) rss_after_warmup = rss_kib();
    fill<T><<<(unsigned)((a.mloc * a.nloc + 255) / 256), 256, 0, s>>>(a.data, a.mloc, a.nloc, a.lld, nb, myprow,
                                                                       nprow, mypcol, npcol, shift);
    CK(cudaMemsetAsync(b.data, 0, sizeof(T) * b.lld * std::max<int64_t>(b.nloc, 1), s));
    CK(ncclAllReduce(flag, flag, 1, ncclDouble, ncclSum, comm, s));  // barrier
    CK(cudaStreamSynchronize(s));
    auto start = Clock::now(), last = start;
    auto phase = [&](const char* name) {  // closes the phase that ran since the last mark
      CK(cudaStreamSynchronize(s));
      auto now = Clock::now();
      if (r > 0) phases[name].push_back(std::chrono::duration<double>(now - last).count());
      last = now;
    };
    void* hw = hwork.data();
    if (op == "potrf") {
      CK(cusolverMpPotrf(h, CUBLAS_FILL_MODE_LOWER, n, a.data, 1, 1, a.desc, dt, dwork, ws.dev, hw, ws.host, info));
      phase("potrf");
    } else if (op == "getrf") {
      if (query_each_rep) {  // as jaxmg's handler does on every call
        size_t d = 0, hb = 0;
        CK(cusolverMpGetrf_bufferSize(h, n, n, a.data, 1, 1, a.desc, ipiv, dt, &d, &hb));
      }
      CK(cusolverMpGetrf(h, n, n, a.data, 1, 1, a.desc, ipiv, dt, dwork, ws.dev, hw, ws.host, info));
      phase("getrf");
      CK(cusolverMpGetrs(h, CUBLAS_OP_N, n, 1, a.data, 1, 1, a.desc, ipiv, b.data, 1, 1, b.desc, dt, dwork, ws.dev,
                         hw, ws.host, info));
      phase("getrs");
    } else if (op == "geqrf" || op == "qr" || op == "lstsq") {
      CK(cusolverMpGeqrf(h, m, n, a.data, 1, 1, a.desc, tau, dt, dwork, ws.dev, hw, ws.host, info));
      phase("geqrf");
      if (op == "qr") {
        CK(cusolverMpOrgqr(h, m, n, n, a.data, 1, 1, a.desc, tau, dt, dwork, ws.dev, hw, ws.host, info));
        phase("orgqr");
      }
      if (op == "lstsq") {
        CK(cusolverMpOrmqr(h, CUBLAS_SIDE_LEFT, adjoint, m, 1, n, a.data, 1, 1, a.desc, tau, b.data, 1, 1, b.desc,
                           dt, dwork, ws.dev, hw, ws.host, info));
        phase("ormqr");
      }
    } else if (op == "gels") {
      CK(cusolverMpGels(h, CUBLAS_OP_N, m, n, 1, a.data, 1, 1, a.desc, b.data, 1, 1, b.desc, dt, dwork, ws.dev, hw,
                        ws.host, info));
      phase("gels");
    } else if (op == "syevd") {
      CK(cusolverMpSyevd(h, compz, CUBLAS_FILL_MODE_LOWER, n, a.data, 1, 1, a.desc, w, z.data, 1, 1, z.desc, dt,
                         dwork, ws.dev, hw, ws.host, info));
      phase("syevd");
    }
    if (r > 0) totals.push_back(std::chrono::duration<double>(last - start).count());
  }
  const long rss_end = rss_kib();
  int hinfo = -1;
  CK(cudaMemcpy(&hinfo, info, sizeof(int), cudaMemcpyDeviceToHost));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (rank == 0) {
    std::string ph;
    for (auto& [name, ts] : phases) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s\"%s\": %.5f", ph.empty() ? "" : ", ", name.c_str(), median(ts));
      ph += buf;
    }
    std::printf("{\"op\": \"engine_%s\", \"m\": %lld, \"n\": %lld, \"T\": %lld, \"grid\": [%d, %d], \"mapping\": \"%s\", "
                "\"dtype\": \"%s\", \"reps\": %d, \"median_s\": %.5f, \"phases_s\": {%s}, \"init_s\": %.3f, "
                "\"info\": %d, \"work_mib\": %.1f, \"host_work_mib\": %.1f, \"rss_growth_kib_per_rep\": %.1f}\n",
                op.c_str(), (long long)m, (long long)n, (long long)nb, nprow, npcol, row_major ? "row" : "col",
                dt == CUDA_R_64F ? "float64" : "float32", reps, median(totals), ph.c_str(), init_s, hinfo,
                ws.dev / 1048576.0, ws.host / 1048576.0,
                reps > 0 && rss_after_warmup >= 0 ? (double)(rss_end - rss_after_warmup) / reps : -1.0);
    std::fflush(stdout);
  }
  cusolverMpDestroyGrid(grid);
  cusolverMpDestroy(h);
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 11) {
    std::fprintf(stderr,
                 "usage: %s RANK NRANKS IDFILE NPROW M N T d|s REPS potrf|getrf|geqrf|qr|lstsq|gels|syevd [col|row]\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), nranks = std::atoi(argv[2]), nprow = std::atoi(argv[4]);
  const int64_t m = std::atoll(argv[5]), n = std::atoll(argv[6]), nb = std::atoll(argv[7]);
  const char dt = argv[8][0];
  const int reps = std::max(1, std::atoi(argv[9]));
  const std::string op = argv[10];
  const bool row_major = argc > 11 && std::string(argv[11]) == "row";
  return dt == 's' ? run<float>(rank, nranks, argv[3], nprow, m, n, nb, reps, CUDA_R_32F, op, row_major)
                   : run<double>(rank, nranks, argv[3], nprow, m, n, nb, reps, CUDA_R_64F, op, row_major);
}
