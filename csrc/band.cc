// jaxmg_sb2st, jaxmg_tridiagonal_bisection and jaxmg_stedc: stages 2 and 3 of the two-stage
// Hermitian eigensolver on the calling GPU (the kernels are in band.cu; stage 1, dense -> band,
// is matrix products in XLA: jaxmg/kernels/two_stage.py).
//   jaxmg_sb2st(ab) -> (d, e, v, tau): ab (..., b + 1, n) row-major, row r holding B(j + r, j)
//     (LAPACK's lower band storage, read as JAX's (b + 1, n) array); d (..., n) the real diagonal
//     and e (..., n - 1) the subdiagonal (ab's dtype) of the tridiagonal Q^H B Q, by bulge
//     chasing; v (..., S, K, b) and tau (..., S, K) Q's reflectors (band.h), or both empty where
//     they are not wanted.
//   jaxmg_tridiagonal_bisection(de) -> w: de (..., 2, n) real (the diagonal; the off-diagonal,
//     its last entry ignored), w (..., n) the eigenvalues ascending.
//   jaxmg_stedc(de) -> (z, w, status): de (..., n, 2) real, column-major (the diagonal, then the
//     off-diagonal with its last entry ignored); z (..., n, n) column-major, the orthonormal
//     eigenvectors, and w (..., n) the eigenvalues, by cuSOLVERMp's divide and conquer
//     (cusolverMpStedc, compz "I") on the calling GPU's one-rank grid (open_local) in square
//     tiles of the attribute `tile` (a power of two: cuSOLVERMp 0.4.2 to 0.8.0's stedc may fail or
//     hang with other tiles); status (...) its info, -1 where it failed without one, and NaN
//     outputs where it is not 0. w comes in cuSOLVERMp's order (the caller sorts).
// A leading batch is looped over on the call's stream; sb2st's scratch is a result of the call
// (jaxmg._native.sb2st_scratch_bytes per matrix), so XLA allocates it with the outputs; stedc's
// workspace (and its copy of the off-diagonal, which it destroys) is the context's.
#include <algorithm>
#include <vector>

#include "band.h"
#include "grid.h"

namespace jaxmg {
namespace {

// sb2st's extents, or an InvalidArgument: d and e, and v and tau either both empty or whole.
ffi::Error check_sb2st(const ffi::AnyBuffer& ab, int64_t b, int64_t n, int64_t batch, const ffi::AnyBuffer& d,
                       const ffi::AnyBuffer& e, const ffi::AnyBuffer& v, const ffi::AnyBuffer& tau) {
  const int64_t off = std::max<int64_t>(n - 1, 0);
  if ((int64_t)d.element_count() != batch * n || (int64_t)e.element_count() != batch * off ||
      e.element_type() != ab.element_type())
    return ffi::Error::InvalidArgument(
        cat("jaxmg_sb2st: d must hold ", batch * n, " reals and e ", batch * off, " elements of ab's dtype"));
  const int64_t tasks = std::max<int64_t>(n - 2, 0) * sb2st_tasks(n, b);
  const bool none = v.element_count() == 0 && tau.element_count() == 0;
  const bool whole = (int64_t)v.element_count() == batch * tasks * b && (int64_t)tau.element_count() == batch * tasks;
  if ((!none && !whole) || v.element_type() != ab.element_type() || tau.element_type() != ab.element_type())
    return ffi::Error::InvalidArgument(cat("jaxmg_sb2st: v and tau must both be empty or hold ", batch * tasks * b,
                                           " and ", batch * tasks, " elements of ab's dtype (S x K x b, S x K)"));
  return ffi::Error::Success();
}

ffi::Error Sb2stImpl(cudaStream_t stream, ffi::AnyBuffer ab, ffi::Result<ffi::AnyBuffer> d,
                     ffi::Result<ffi::AnyBuffer> e, ffi::Result<ffi::AnyBuffer> v, ffi::Result<ffi::AnyBuffer> tau,
                     ffi::Result<ffi::AnyBuffer> scratch) {
  auto dims = ab.dimensions();
  if (dims.size() < 2 || dims[dims.size() - 2] < 1)
    return ffi::Error::InvalidArgument("jaxmg_sb2st: ab must be lower band storage (..., b + 1, n)");
  DType dtype;
  if (ffi::Error err = check_dtype("jaxmg_sb2st", ab.element_type(), &dtype); err.failure()) return err;
  const int64_t b = dims[dims.size() - 2] - 1, n = dims[dims.size() - 1];
  const int64_t batch = batch_of(dims, 2);
  if (ffi::Error err = check_sb2st(ab, b, n, batch, *d, *e, *v, *tau); err.failure()) return err;
  const bool reflectors = v->element_count() > 0;
  try {
    const int64_t esize = elem_bytes(dtype), rsize = real_bytes(dtype);
    const int64_t bytes = sb2st_scratch_bytes(n, b, esize);
    if ((int64_t)scratch->size_bytes() < batch * bytes)
      return ffi::Error::InvalidArgument(cat("jaxmg_sb2st: scratch must hold ", batch * bytes,
                                             " bytes (jaxmg._native.sb2st_scratch_bytes per matrix)"));
    const int64_t tasks = std::max<int64_t>(n - 2, 0) * sb2st_tasks(n, b);
    for (int64_t k = 0; k < batch; ++k)
      check_cuda(sb2st(static_cast<const char*>(ab.untyped_data()) + k * (b + 1) * n * esize, n, b, dtype,
                       static_cast<char*>(d->untyped_data()) + k * n * rsize,
                       static_cast<char*>(e->untyped_data()) + k * std::max<int64_t>(n - 1, 0) * esize,
                       reflectors ? static_cast<char*>(v->untyped_data()) + k * tasks * b * esize : nullptr,
                       reflectors ? static_cast<char*>(tau->untyped_data()) + k * tasks * esize : nullptr,
                       static_cast<char*>(scratch->untyped_data()) + k * bytes, stream),
                 "sb2st");
    return ffi::Error::Success();
  } catch (const std::exception& ex) {
    return to_error(ex);
  }
}

ffi::Error BisectionImpl(cudaStream_t stream, ffi::AnyBuffer de, ffi::Result<ffi::AnyBuffer> w) {
  auto dims = de.dimensions();
  if (dims.size() < 2 || dims[dims.size() - 2] != 2)
    return ffi::Error::InvalidArgument(
        "jaxmg_tridiagonal_bisection: de must be (..., 2, n): the diagonal and off-diagonal");
  if (de.element_type() != ffi::DataType::F32 && de.element_type() != ffi::DataType::F64)
    return ffi::Error::InvalidArgument("jaxmg_tridiagonal_bisection: de must be float32 or float64");
  const int64_t n = dims[dims.size() - 1], batch = batch_of(dims, 2);
  if ((int64_t)w->element_count() != batch * n || w->element_type() != de.element_type())
    return ffi::Error::InvalidArgument(
        cat("jaxmg_tridiagonal_bisection: w must hold ", batch * n, " elements of de's dtype"));
  const int rsize = de.element_type() == ffi::DataType::F32 ? 4 : 8;
  try {
    for (int64_t k = 0; k < batch; ++k)
      check_cuda(tridiagonal_bisection(static_cast<const char*>(de.untyped_data()) + k * 2 * n * rsize, n, rsize,
                                       static_cast<char*>(w->untyped_data()) + k * n * rsize, stream),
                 "tridiagonal_bisection");
    return ffi::Error::Success();
  } catch (const std::exception& ex) {
    return to_error(ex);
  }
}

// One stedc problem: a stack of `batch` real symmetric tridiagonals of order n.
struct Tridiagonal {
  int64_t n = 0, batch = 1, tile = 1;
  DType dtype = DType::F64;
};

ffi::Error check_stedc(const ffi::AnyBuffer& de, const ffi::AnyBuffer& z, const ffi::AnyBuffer& w, size_t statuses,
                       int64_t tile, Tridiagonal* t) {
  auto dims = de.dimensions();
  if (dims.size() < 2 || dims[dims.size() - 1] != 2)
    return ffi::Error::InvalidArgument("jaxmg_stedc: de must be (..., n, 2), column-major: d, then e");
  if (de.element_type() != ffi::DataType::F32 && de.element_type() != ffi::DataType::F64)
    return ffi::Error::InvalidArgument("jaxmg_stedc: de must be float32 or float64");
  t->dtype = de.element_type() == ffi::DataType::F32 ? DType::F32 : DType::F64;
  t->n = dims[dims.size() - 2], t->batch = batch_of(dims, 2), t->tile = tile;
  if ((int64_t)z.element_count() != t->batch * t->n * t->n || z.element_type() != de.element_type() ||
      (int64_t)w.element_count() != t->batch * t->n || w.element_type() != de.element_type() ||
      (int64_t)statuses != t->batch)
    return ffi::Error::InvalidArgument(cat("jaxmg_stedc: z must hold ", t->batch * t->n * t->n, " and w ",
                                           t->batch * t->n, " elements of de's dtype, status ", t->batch));
  if (tile < 1 || (tile & (tile - 1)))
    return ffi::Error::InvalidArgument(cat("jaxmg_stedc: tile must be a power of two; got ", tile));
  return ffi::Error::Success();
}

// One entry of order 1: w = d, z = 1, status 0.
void stedc_order_one(GridCall& g, const Tridiagonal& t, const char* d, char* z, char* w, int32_t* status) {
  static const float one_f = 1;
  static const double one_d = 1;
  const int64_t rs = real_bytes(t.dtype);
  const void* one = t.dtype == DType::F32 ? static_cast<const void*>(&one_f) : static_cast<const void*>(&one_d);
  check_cuda(cudaMemcpyAsync(w, d, rs, cudaMemcpyDeviceToDevice, g.stream), "cudaMemcpyAsync(d to w)");
  check_cuda(cudaMemcpyAsync(z, one, rs, cudaMemcpyHostToDevice, g.stream), "cudaMemcpyAsync(z)");
  set_status(g, status, 0);
}

// cusolverMpStedc on every entry: w starts as d and becomes the eigenvalues, the off-diagonal
// is copied into the context's workspace (stedc destroys it), z the eigenvectors; a failed entry
// (status not 0) has NaN outputs.
void stedc(GridCall& g, const Tridiagonal& t, const char* de, char* z, char* w, int32_t* status) {
  Context& ctx = *g.ctx;
  const int64_t n = t.n, rs = real_bytes(t.dtype);
  const cudaDataType type = cuda_type(t.dtype);
  if (n == 1) {  // no cuSOLVERMp call
    for (int64_t k = 0; k < t.batch; ++k) stedc_order_one(g, t, de + k * 2 * rs, z + k * rs, w + k * rs, status + k);
    return;
  }
  if (!api().cusolverMpStedc || !api().cusolverMpStedc_bufferSize)
    throw Failure("jaxmg native: the loaded cuSOLVERMp has no cusolverMpStedc (jaxmg._native.capabilities()['stedc'])");
  cusolverMpMatrixDescriptor_t desc = ctx.matrix_desc(1, 1, type, n, n, t.tile, t.tile, n);
  char compz[] = "I";
  std::vector<int> iwork(std::max<int64_t>(n, 3) + 1);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpStedc_bufferSize(ctx.handle, compz, n, w, const_cast<char*>(de) + n * rs, z, 1, 1, desc,
                                            type, &dwork, &hwork, iwork.data()),
           "cusolverMpStedc_bufferSize");
  const size_t e_at = (dwork + 255) / 256 * 256;  // the off-diagonal's copy, after stedc's workspace
  timed_batch(g, "stedc", t.batch, e_at + n * rs, hwork, /*factors=*/false, [&](int64_t k) {
    const char* dk = de + k * 2 * n * rs;
    char *wk = w + k * n * rs, *zk = z + k * n * n * rs, *ek = static_cast<char*>(ctx.work.ptr) + e_at;
    check_cuda(cudaMemcpyAsync(wk, dk, n * rs, cudaMemcpyDeviceToDevice, g.stream), "cudaMemcpyAsync(d to w)");
    check_cuda(cudaMemcpyAsync(ek, dk + n * rs, n * rs, cudaMemcpyDeviceToDevice, g.stream), "cudaMemcpyAsync(e)");
    set_status(g, status + k, 0);
    cusolverStatus_t st = api().cusolverMpStedc(ctx.handle, compz, n, wk, ek, zk, 1, 1, desc, type, ctx.work.ptr, dwork,
                                                ctx.host_work.data(), ctx.host_work.size(), status + k);
    JAXMG_TRACE("stedc returned ", (int)st);
    fill_failed(g, entry_status(g, st, status + k, "cusolverMpStedc"),
                {{wk, (size_t)(n * rs)}, {zk, (size_t)(n * n * rs)}});
  });
}

ffi::Error StedcImpl(cudaStream_t stream, ffi::AnyBuffer de, ffi::Result<ffi::AnyBuffer> z,
                     ffi::Result<ffi::AnyBuffer> w, ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t tile) {
  Tridiagonal t;
  if (ffi::Error err = check_stedc(de, *z, *w, status->element_count(), tile, &t); err.failure()) return err;
  if (t.n == 0 || t.batch == 0) return ffi::Error::Success();
  return on_local(stream, [&](GridCall& g) {
    JAXMG_TRACE("stedc: n ", t.n, " tile ", t.tile, " batch ", t.batch);
    stedc(g, t, static_cast<const char*>(de.untyped_data()), static_cast<char*>(z->untyped_data()),
          static_cast<char*>(w->untyped_data()), status->typed_data());
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_sb2st, Sb2stImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()    // ab (..., b + 1, n), lower band storage
                                  .Ret<ffi::AnyBuffer>()    // d (..., n), real
                                  .Ret<ffi::AnyBuffer>()    // e (..., n - 1), ab's dtype
                                  .Ret<ffi::AnyBuffer>()    // v (..., S, K, b) or empty
                                  .Ret<ffi::AnyBuffer>()    // tau (..., S, K) or empty
                                  .Ret<ffi::AnyBuffer>());  // scratch (..., sb2st_scratch_bytes) uint8

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_tridiagonal_bisection, BisectionImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()    // de (..., 2, n), real
                                  .Ret<ffi::AnyBuffer>());  // w (..., n), ascending

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_stedc, StedcImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()         // de (..., n, 2), real, column-major
                                  .Ret<ffi::AnyBuffer>()         // z (..., n, n), column-major
                                  .Ret<ffi::AnyBuffer>()         // w (..., n)
                                  .Ret<ffi::Buffer<ffi::S32>>()  // status (...)
                                  .Attr<int64_t>("tile"));       // square tiles, a power of two

}  // namespace jaxmg
