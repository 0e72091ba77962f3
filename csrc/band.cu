// Stages 2 and 3 of the two-stage Hermitian eigensolver on one GPU.
//
// sb2st: a Hermitian band matrix B (half-bandwidth b) reduced to a tridiagonal T = Q^H B Q by
// bulge chasing, in LAPACK dsb2st's task order (the reference, task for task, is
// jaxmg/kernels/two_stage.py: band_to_tridiagonal_reference). Sweep i (0 .. n - 3) annihilates
// column i below its first subdiagonal; its task t works on the window of 3b rows and columns
// starting at row and column c, with a reflector from column c's rows c + d .. c + d + b - 1:
//
//     t = 0:  c = i,                   d = 1   (column i itself)
//     t > 0:  c = i + 1 + (t - 1) b,   d = b   (the first column of the bulge the last task made)
//
// and sweep i has (n - 3 - i) / b + 1 tasks (reflectors starting at rows <= n - 2). Every task:
//   v, tau, beta = larfg(A(c + d .. c + d + b - 1, c));   p = tau A_win v;
//   w = p - 1/2 (conj(tau) v^H p) v;   A_win -= w v^H + v w^H;   A(c + d.., c) = (beta, 0, ...).
//
// One persistent kernel: each thread block takes the next sweep (an atomic counter, so a sweep
// only waits for sweeps already taken by running blocks: no deadlock at any grid size) and runs
// its tasks in order. Task t of sweep i may start once sweep i - 1 has completed its tasks up to
// t + 3 (or all of them): task t' of sweep i - 1 starts at row i + (t' - 1) b, beyond the end of
// task t's window (i + 1 + (t + 2) b) exactly when t' >= t + 4, so every pair of tasks whose
// windows overlap runs in the sequential order, and the result is the sequential algorithm's.
// Progress is one int per sweep (tasks completed), published after a __threadfence(); the band
// is read through L2 (ld.global.cg), never from a stale L1 line.
//
// With reflectors, each task also writes its v (b entries, v[0] = 1) and tau to global memory at
// (sweep i, task t): Q = prod over (i, t) in lexicographic order of (I - tau v v^H), T = Q^H B Q.
// The outputs are zeroed first, so the tasks a sweep does not have are identities (tau = 0), and
// so are all of them where b = 1 (the band is already tridiagonal).
//
// The band lives in a working copy, lower band storage with 3b + 1 rows per column (the window
// of a task spans |i - j| <= 3b - 1) and 3b zero columns past the end, so that no task checks
// bounds (the reference pads its dense copy alike).
//
// tridiagonal_bisection: the eigenvalues of a real symmetric tridiagonal, one thread per
// eigenvalue: bisection on Sturm counts (LAPACK dlaebz's recurrence with the pivmin guard) from
// the Gershgorin interval, on the matrix scaled to norm 1, to an absolute width of 2 eps ||T||.
#include <cuComplex.h>

#include <cfloat>
#include <cstdint>

#include "band.h"
#include "scalar.cuh"

namespace jaxmg {
namespace {

constexpr int kThreads = 256;

using namespace scalar;

// A load through L2 (other blocks' writes are published there, never in this SM's L1).
__device__ __forceinline__ float ldcg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ double ldcg(const double* p) { return __ldcg(p); }
__device__ __forceinline__ cuFloatComplex ldcg(const cuFloatComplex* p) { return __ldcg(p); }
__device__ __forceinline__ cuDoubleComplex ldcg(const cuDoubleComplex* p) { return __ldcg(p); }

// --- block reductions ----------------------------------------------------------------------------

template <typename R>
__device__ R block_sum(R x, R* red) {
  red[threadIdx.x] = x;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  R out = red[0];
  __syncthreads();
  return out;
}

template <typename R>
__device__ R block_max(R x, R* red) {
  red[threadIdx.x] = x;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  R out = red[0];
  __syncthreads();
  return out;
}

// --- the band in lower storage -------------------------------------------------------------------

template <typename T>
struct Band {
  T* w;        // (3b + 1) x (n + 3b), column-major: A(i, j) = w[(i - j) + j * ld] for i >= j
  int64_t ld;  // 3b + 1
  __device__ T* at(int64_t i, int64_t j) const { return w + (i - j) + j * ld; }
  // A(i, j) of the Hermitian matrix (either triangle).
  __device__ T get(int64_t i, int64_t j) const { return i >= j ? ldcg(at(i, j)) : cj(ldcg(at(j, i))); }
};

// The shared arrays of one task.
template <typename T>
struct TaskShared {
  T* x;                           // b: the column to annihilate
  T* v;                           // b: the reflector (v[0] = 1)
  T* p;                           // 3b: tau A_win v
  T* w;                           // 3b: p - 1/2 s v
  typename RealOf<T>::type* red;  // blockDim: reductions
  T* scalars;                     // tau, beta, 1 / (alpha - beta), s
};

// LAPACK's larfg on x (shared, b entries): v, tau, beta (real, in scalars[1]); tau = 0 where x[1:]
// is zero and x[0] real.
template <typename T>
__device__ void larfg(const TaskShared<T>& sh, int b) {
  using R = typename RealOf<T>::type;
  R m = 0;
  for (int k = 1 + threadIdx.x; k < b; k += blockDim.x) m = fmax(m, sqrt(abs2(sh.x[k])));
  const R scale = block_max(m, sh.red);
  R s2 = 0;
  if (scale > 0)
    for (int k = 1 + threadIdx.x; k < b; k += blockDim.x) {
      const R xr = re(sh.x[k]) / scale, xi = im(sh.x[k]) / scale;  // scaled first: no underflow
      s2 += xr * xr + xi * xi;
    }
  const R xnorm = scale * sqrt(block_sum(s2, sh.red));
  if (threadIdx.x == 0) {
    const T alpha = sh.x[0];
    const R alphr = re(alpha), alphi = im(alpha);
    if (xnorm == 0 && alphi == 0) {
      sh.scalars[0] = make<T>(0, 0);
      sh.scalars[1] = make<T>(alphr, 0);
      sh.scalars[2] = make<T>(0, 0);
    } else {
      const R beta = -copysign(hypot(hypot(alphr, alphi), xnorm), alphr);
      sh.scalars[0] = make<T>((beta - alphr) / beta, -alphi / beta);
      sh.scalars[1] = make<T>(beta, 0);
      sh.scalars[2] = div(make<T>(1, 0), sub(alpha, make<T>(beta, 0)));
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < b; k += blockDim.x) sh.v[k] = k == 0 ? make<T>(1, 0) : mul(sh.x[k], sh.scalars[2]);
  __syncthreads();
}

// One task: the window of 3b rows and columns at (c, c), the reflector from column c's rows
// c + d .. c + d + b - 1.
template <typename T>
__device__ void chase_task(const Band<T>& A, const TaskShared<T>& sh, int64_t c, int d, int b) {
  using R = typename RealOf<T>::type;
  const int L = 3 * b;
  for (int k = threadIdx.x; k < b; k += blockDim.x) sh.x[k] = ldcg(A.at(c + d + k, c));
  __syncthreads();
  larfg(sh, b);
  const T tau = sh.scalars[0];
  // p = tau A_win v  (v lives on the window's rows d .. d + b - 1)
  for (int x = threadIdx.x; x < L; x += blockDim.x) {
    T acc = make<T>(0, 0);
    for (int k = 0; k < b; ++k) acc = add(acc, mul(A.get(c + x, c + d + k), sh.v[k]));
    sh.p[x] = mul(tau, acc);
  }
  __syncthreads();
  // s = conj(tau) v^H p; w = p - 1/2 s v
  R sr = 0, si = 0;
  for (int k = threadIdx.x; k < b; k += blockDim.x) {
    const T t = mul(cj(sh.v[k]), sh.p[d + k]);
    sr += re(t);
    si += im(t);
  }
  sr = block_sum(sr, sh.red);
  si = block_sum(si, sh.red);
  const T half_s = mul(cj(tau), make<T>(sr / 2, si / 2));
  for (int x = threadIdx.x; x < L; x += blockDim.x) {
    const T vx = (x >= d && x < d + b) ? sh.v[x - d] : make<T>(0, 0);
    sh.w[x] = sub(sh.p[x], mul(half_s, vx));
  }
  __syncthreads();
  // A_win -= w v^H + v w^H on the lower triangle: rows d .. L - 1, columns 0 .. min(x, d + b - 1),
  // where the row or the column is one of the reflector's.
  const int cols = d + b, rows = L - d;
  for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {
    const int x = d + idx / cols, y = idx % cols;
    if (y > x || (x >= d + b && y < d)) continue;
    const T vx = x < d + b ? sh.v[x - d] : make<T>(0, 0);
    const T vy = y >= d ? sh.v[y - d] : make<T>(0, 0);
    T* a = A.at(c + x, c + y);
    *a = sub(ldcg(a), add(mul(sh.w[x], cj(vy)), mul(vx, cj(sh.w[y]))));
  }
  __syncthreads();
  for (int k = threadIdx.x; k < b; k += blockDim.x) *A.at(c + d + k, c) = k == 0 ? sh.scalars[1] : make<T>(0, 0);
  __syncthreads();
}

__device__ __forceinline__ int sweep_tasks(int64_t n, int b, int64_t i) { return (int)((n - 3 - i) / b + 1); }

// Where a task's reflector goes (v and tau null: nowhere): task t of sweep i at v[(i K + t) b ..]
// and tau[i K + t], K = the most tasks of a sweep (sb2st_tasks).
template <typename T>
struct Reflectors {
  T* v;
  T* tau;
  int64_t tasks;
};

// The reflector of the task just run (sh.v, sh.scalars[0]) written to its place.
template <typename T>
__device__ void store_reflector(const Reflectors<T>& out, const TaskShared<T>& sh, int64_t i, int t, int b) {
  if (!out.v) return;
  const int64_t at = i * out.tasks + t;
  for (int k = threadIdx.x; k < b; k += blockDim.x) out.v[at * b + k] = sh.v[k];
  if (threadIdx.x == 0) out.tau[at] = sh.scalars[0];
}

template <typename T>
__global__ void chase_kernel(Band<T> A, int64_t n, int b, int* counter, int* progress, Reflectors<T> out) {
  using R = typename RealOf<T>::type;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* base = reinterpret_cast<T*>(smem_raw);
  TaskShared<T> sh{base, base + b, base + 2 * b, base + 5 * b, reinterpret_cast<R*>(base + 8 * b + 4), base + 8 * b};
  __shared__ int sweep;
  const int64_t sweeps = n - 2;
  for (;;) {
    if (threadIdx.x == 0) sweep = atomicAdd(counter, 1);
    __syncthreads();
    const int64_t i = sweep;
    __syncthreads();
    if (i >= sweeps) return;
    const int tasks = sweep_tasks(n, b, i);
    const int before = i > 0 ? sweep_tasks(n, b, i - 1) : 0;
    for (int t = 0; t < tasks; ++t) {
      if (i > 0 && threadIdx.x == 0) {
        const int need = min(t + 4, before);
        while (*(volatile int*)(progress + i - 1) < need) __nanosleep(64);
        __threadfence();
      }
      __syncthreads();
      const int64_t c = t == 0 ? i : i + 1 + (int64_t)(t - 1) * b;
      chase_task(A, sh, c, t == 0 ? 1 : b, b);
      store_reflector(out, sh, i, t, b);
      __threadfence();  // every thread's writes of the task, before the flag that publishes them
      __syncthreads();
      if (threadIdx.x == 0) atomicExch(progress + i, t + 1);
    }
  }
}

template <typename T>
__global__ void load_band(const T* ab, int64_t n, int b, Band<T> A) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= n) return;
  for (int r = 0; r <= b && j + r < n; ++r) {
    T v = ab[r * n + j];  // row r of the (b + 1) x n row-major band: B(j + r, j)
    *A.at(j + r, j) = r == 0 ? make<T>(re(v), 0) : v;
  }
}

template <typename T>
__global__ void store_tridiagonal(Band<T> A, int64_t n, typename RealOf<T>::type* d, T* e) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= n) return;
  d[j] = re(*A.at(j, j));
  if (j + 1 < n) e[j] = *A.at(j + 1, j);
}

template <typename T>
cudaError_t sb2st_typed(const T* ab, int64_t n, int64_t b, typename RealOf<T>::type* d, T* e, Reflectors<T> out,
                        void* scratch, cudaStream_t stream) {
  using R = typename RealOf<T>::type;
  const int64_t ld = 3 * b + 1, cols = n + 3 * b;
  Band<T> A{reinterpret_cast<T*>(scratch), ld};
  const size_t band_bytes = ((ld * cols * sizeof(T) + 255) / 256) * 256;
  int* counter = reinterpret_cast<int*>(reinterpret_cast<char*>(scratch) + band_bytes);
  int* progress = counter + 1;
  const int64_t sweeps = n > 2 ? n - 2 : 0;
  cudaError_t err = cudaMemsetAsync(scratch, 0, band_bytes + (1 + sweeps) * sizeof(int), stream);
  if (err == cudaSuccess && out.v && sweeps > 0)
    err = cudaMemsetAsync(out.v, 0, sweeps * out.tasks * b * sizeof(T), stream);
  if (err == cudaSuccess && out.tau && sweeps > 0)
    err = cudaMemsetAsync(out.tau, 0, sweeps * out.tasks * sizeof(T), stream);
  if (err != cudaSuccess) return err;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (n == 0) return cudaSuccess;
  load_band<T><<<blocks, kThreads, 0, stream>>>(ab, n, (int)b, A);
  if (b > 1 && sweeps > 0) {
    int device = 0, sms = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
    const size_t smem = 8 * b * sizeof(T) + 4 * sizeof(T) + kThreads * sizeof(R);
    const int64_t grid = sweeps < 2 * (int64_t)sms ? sweeps : 2 * (int64_t)sms;
    chase_kernel<T><<<(unsigned)grid, kThreads, smem, stream>>>(A, n, (int)b, counter, progress, out);
  }
  store_tridiagonal<T><<<blocks, kThreads, 0, stream>>>(A, n, d, e);
  return cudaGetLastError();
}

// --- stage 3: bisection ---------------------------------------------------------------------------

// How many eigenvalues of the tridiagonal (d, e scaled by inv) are below x.
template <typename R>
__device__ int sturm_count(const R* d, const R* e, int64_t n, R inv, R x, R pivmin) {
  int count = 0;
  R q = d[0] * inv - x;
  if (fabs(q) < pivmin) q = -pivmin;
  count += q < 0;
  for (int64_t j = 1; j < n; ++j) {
    const R ej = e[j - 1] * inv;
    q = d[j] * inv - x - ej * ej / q;
    if (fabs(q) < pivmin) q = -pivmin;
    count += q < 0;
  }
  return count;
}

template <typename R>
__global__ void bisection_kernel(const R* de, int64_t n, R* w) {
  const int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (k >= n) return;
  const R* d = de;
  const R* e = de + n;
  const R eps = sizeof(R) == 4 ? (R)FLT_EPSILON / 2 : (R)DBL_EPSILON / 2;
  const R safmin = sizeof(R) == 4 ? (R)FLT_MIN : (R)DBL_MIN;
  R norm = 0;
  for (int64_t j = 0; j < n; ++j) {
    const R off = (j > 0 ? fabs(e[j - 1]) : (R)0) + (j + 1 < n ? fabs(e[j]) : (R)0);
    norm = fmax(norm, fabs(d[j]) + off);
  }
  if (norm == 0) {
    w[k] = 0;
    return;
  }
  const R inv = 1 / norm;
  R lo = -1, hi = 1, emax = 0;  // the Gershgorin interval of the scaled matrix lies in [-1, 1]
  for (int64_t j = 0; j + 1 < n; ++j) emax = fmax(emax, fabs(e[j]) * inv);
  const R pivmin = safmin * fmax((R)1, emax * emax);
  lo -= 4 * eps;
  hi += 4 * eps;
  // The scaled matrix has norm 1: an absolute width of 4 eps is 2 eps ||T|| on each side.
  for (int iter = 0; iter < 128 && hi - lo > 4 * eps; ++iter) {
    const R mid = (lo + hi) / 2;
    if (sturm_count(d, e, n, inv, mid, pivmin) > k)
      hi = mid;
    else
      lo = mid;
  }
  w[k] = (lo + hi) / 2 * norm;
}

}  // namespace

int64_t sb2st_scratch_bytes(int64_t n, int64_t b, int64_t elem_size) {
  const int64_t band = (3 * b + 1) * (n + 3 * b) * elem_size;
  return ((band + 255) / 256) * 256 + (1 + (n > 2 ? n - 2 : 0)) * (int64_t)sizeof(int);
}

int64_t sb2st_tasks(int64_t n, int64_t b) { return n < 3 || b < 1 ? 0 : (n - 3) / b + 1; }

cudaError_t sb2st(const void* ab, int64_t n, int64_t b, DType dtype, void* d, void* e, void* v, void* tau,
                  void* scratch, cudaStream_t stream) {
  return with_elem_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    using R = typename RealOf<T>::type;
    const Reflectors<T> out{static_cast<T*>(v), static_cast<T*>(tau), sb2st_tasks(n, b)};
    return sb2st_typed<T>(static_cast<const T*>(ab), n, b, static_cast<R*>(d), static_cast<T*>(e), out, scratch,
                          stream);
  });
}

cudaError_t tridiagonal_bisection(const void* de, int64_t n, int real_bytes, void* w, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (real_bytes == 4)
    bisection_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(de), n, static_cast<float*>(w));
  else
    bisection_kernel<double>
        <<<blocks, kThreads, 0, stream>>>(static_cast<const double*>(de), n, static_cast<double*>(w));
  return cudaGetLastError();
}

}  // namespace jaxmg
