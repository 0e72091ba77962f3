// jaxmg_sb2st and jaxmg_tridiagonal_bisection: stages 2 and 3 of the two-stage Hermitian
// eigensolver on the calling GPU (the kernels are in band.cu; stage 1, dense -> band, is matrix
// products in XLA: jaxmg/kernels/two_stage.py).
//   jaxmg_sb2st(ab) -> (d, e): ab (..., b + 1, n) row-major, row r holding B(j + r, j) (LAPACK's
//     lower band storage, read as JAX's (b + 1, n) array); d (..., n) the real diagonal and
//     e (..., n - 1) the subdiagonal (ab's dtype) of the tridiagonal Q^H B Q, by bulge chasing.
//   jaxmg_tridiagonal_bisection(de) -> w: de (..., 2, n) real (the diagonal; the off-diagonal,
//     its last entry ignored), w (..., n) the eigenvalues ascending.
// A leading batch is looped over on the call's stream; sb2st's scratch is a result of the call
// (jaxmg._native.sb2st_scratch_bytes per matrix), so XLA allocates it with the outputs.
#include <algorithm>

#include "band.h"
#include "grid.h"

namespace jaxmg {
namespace {

int64_t batch_of(ffi::Span<const int64_t> dims, size_t matrix_rank) {
  int64_t batch = 1;
  for (size_t k = 0; k + matrix_rank < dims.size(); ++k) batch *= dims[k];
  return batch;
}

ffi::Error Sb2stImpl(cudaStream_t stream, ffi::AnyBuffer ab, ffi::Result<ffi::AnyBuffer> d,
                     ffi::Result<ffi::AnyBuffer> e, ffi::Result<ffi::AnyBuffer> scratch) {
  auto dims = ab.dimensions();
  if (dims.size() < 2 || dims[dims.size() - 2] < 1)
    return ffi::Error::InvalidArgument("jaxmg_sb2st: ab must be lower band storage (..., b + 1, n)");
  DType dtype;
  if (ffi::Error err = check_dtype("jaxmg_sb2st", ab.element_type(), &dtype); err.failure()) return err;
  const int64_t b = dims[dims.size() - 2] - 1, n = dims[dims.size() - 1];
  const int64_t batch = batch_of(dims, 2);
  if ((int64_t)d->element_count() != batch * n || (int64_t)e->element_count() != batch * std::max<int64_t>(n - 1, 0) ||
      e->element_type() != ab.element_type())
    return ffi::Error::InvalidArgument(cat("jaxmg_sb2st: d must hold ", batch * n, " reals and e ",
                                           batch * std::max<int64_t>(n - 1, 0), " elements of ab's dtype"));
  try {
    const int64_t esize = elem_bytes(dtype), rsize = real_bytes(dtype);
    const int64_t bytes = sb2st_scratch_bytes(n, b, esize);
    if ((int64_t)scratch->size_bytes() < batch * bytes)
      return ffi::Error::InvalidArgument(cat("jaxmg_sb2st: scratch must hold ", batch * bytes,
                                             " bytes (jaxmg._native.sb2st_scratch_bytes per matrix)"));
    for (int64_t k = 0; k < batch; ++k)
      check_cuda(sb2st(static_cast<const char*>(ab.untyped_data()) + k * (b + 1) * n * esize, n, b, dtype,
                       static_cast<char*>(d->untyped_data()) + k * n * rsize,
                       static_cast<char*>(e->untyped_data()) + k * std::max<int64_t>(n - 1, 0) * esize,
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

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_sb2st, Sb2stImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()    // ab (..., b + 1, n), lower band storage
                                  .Ret<ffi::AnyBuffer>()    // d (..., n), real
                                  .Ret<ffi::AnyBuffer>()    // e (..., n - 1), ab's dtype
                                  .Ret<ffi::AnyBuffer>());  // scratch (..., sb2st_scratch_bytes) uint8

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_tridiagonal_bisection, BisectionImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()    // de (..., 2, n), real
                                  .Ret<ffi::AnyBuffer>());  // w (..., n), ascending

}  // namespace jaxmg
