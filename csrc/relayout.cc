// jaxmg_relayout: a square matrix (or a stack of them) rearranged in its own buffer on the calling
// GPU, so that the one-GPU factorisations need no second matrix to change between JAX's row-major
// layout and the column-major one of cuSOLVER and LAPACK:
//   mode 0 (transpose):            out = x^T;
//   mode 1 (symmetric_from_lower): out = tril(x) + triu(x^T, 1), the symmetric matrix of x's lower
//                                  triangle, whose row-major bytes hold that triangle where a
//                                  column-major reader looks for it;
//   mode 2 (lower_of_transpose):   out = tril(x^T), zero above the diagonal: a column-major lower
//                                  factor read as a row-major one.
// Nothing is conjugated. Operand and result are row-major (..., n, n); the result aliases the
// operand (input_output_aliases), and is a copy where XLA did not alias them.
#include "codes.h"
#include "grid.h"
#include "layout.h"

namespace jaxmg {
namespace {

ffi::Error RelayoutImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out, int64_t mode) {
  auto xd = x.dimensions(), od = out->dimensions();
  if (xd.size() < 2 || xd[xd.size() - 1] != xd[xd.size() - 2])
    return ffi::Error::InvalidArgument("jaxmg_relayout: the operand must be a square matrix or a stack of them");
  if (od.size() != xd.size() || !std::equal(xd.begin(), xd.end(), od.begin()) ||
      out->element_type() != x.element_type())
    return ffi::Error::InvalidArgument("jaxmg_relayout: the result must have the operand's shape and dtype");
  if (mode != codes::relayout_transpose && mode != codes::relayout_symmetric_from_lower &&
      mode != codes::relayout_lower_of_transpose)
    return ffi::Error::InvalidArgument(cat("jaxmg_relayout: mode must be 0, 1 or 2; got ", mode));
  DType dtype;
  if (ffi::Error e = check_dtype("jaxmg_relayout", x.element_type(), &dtype); e.failure()) return e;
  const int64_t n = xd[xd.size() - 1], batch = batch_of(xd, 2);
  try {
    copy_unless_aliased(*out, x, stream, "cudaMemcpyAsync(relayout operand to result)");
    void* a = out->untyped_data();
    // Row-major (i, j) is column-major (j, i): the row-major upper triangle is the column-major lower one.
    if (mode == codes::relayout_transpose)
      check_cuda(transpose_square(a, n, n, batch, n * n, dtype, stream), "transpose_square");
    else
      check_cuda(
          reflect(a, n, n, batch, n * n, /*to_lower=*/mode == codes::relayout_symmetric_from_lower, /*conjugate=*/false,
                  /*zero_source=*/mode == codes::relayout_lower_of_transpose, dtype, stream),
          "reflect");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_relayout, RelayoutImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()    // x (..., n, n), row-major
                                  .Ret<ffi::AnyBuffer>()    // the rearranged x, row-major (aliases x)
                                  .Attr<int64_t>("mode"));  // 0 transpose, 1 symmetric_from_lower, 2 lower_of_transpose

}  // namespace jaxmg
