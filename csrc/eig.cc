// The eigensolver family: jaxmg_syevd (A z = w z) and jaxmg_sygvd (A z = w B z, B Hermitian
// positive definite, z^H B z = I; cuSOLVERMp's type 1, vectors) on natural-order block-cyclic
// buffers.
//
// Grid: pr x pc with the ROW-MAJOR rank mapping (rank = p * pc + q). The kernel layer
// (jaxmg/kernels/native/eig.py) hands each member the column-major local block of the matrix on
// this grid (it transposes its row-major block locally), so the matrix cuSOLVERMp reads is A
// itself, its lower triangle (uplo = LOWER), and the eigenvectors come back in the same layout:
// no distributed transpose on either side.
//
// cuSOLVERMp 0.8 computes eigenvectors in both calls (syevd's compz = "V"; sygvd's jobz =
// VECTOR): eigenvalues only would cost the same here, so the handlers always return both.
// Status: syevd's info; sygvd's info, or k where the leading minor of order k of B is not
// positive definite (LAPACK's info = n + k); -1 where cuSOLVERMp fails without an info. Agreed
// over the grid; failed outputs are NaN.
#include <utility>

#include "grid.h"

namespace jaxmg {
namespace {

using Problem = GridMatrix;  // m = n

ffi::Error check_problem(Problem& pb, const ffi::AnyBuffer& a, const ffi::AnyBuffer& w, const char* who) {
  if (ffi::Error e = pb.check(who, a); e.failure()) return e;
  if ((int64_t)w.element_count() != pb.batch * pb.n)
    return ffi::Error::InvalidArgument(
        cat(who, ": the eigenvalues have ", w.element_count(), " entries, expected ", pb.batch * pb.n));
  return ffi::Error::Success();
}

// The end of one batch entry: its status from cuSOLVERMp's return `st` and info (`minor_above`
// n maps n + k to k: sygvd's B leading minor; -1 where cuSOLVERMp fails without an info), agreed
// over the grid, and NaN in its outputs w (n real eigenvalues) and z (like a) where it failed.
void finish_entry(GridCall& g, const Problem& pb, cusolverStatus_t st, bool minor_above, int32_t* status, char* w,
                  char* z) {
  const int32_t v = entry_status(g, st, status, "cuSOLVERMp eigensolver");
  if (minor_above && v > pb.n) set_status(g, status, v - (int32_t)pb.n);
  fill_failed(g, agree_status(g, status), {{w, (size_t)(pb.n * real_bytes(pb.dtype))}, {z, (size_t)pb.entry_bytes()}});
}

// syevd on every batch entry: a (destroyed), w (n real eigenvalues, ascending), z (vectors).
void syevd(GridCall& g, const Problem& pb, char* a, char* w, char* z, int32_t* status) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t n = pb.n, entry = pb.entry_bytes(), wsz = n * real_bytes(pb.dtype);
  cusolverMpMatrixDescriptor_t desc = pb.desc(ctx, /*row_major=*/true);
  char compz[] = "V";
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpSyevd_bufferSize(ctx.handle, compz, CUBLAS_FILL_MODE_LOWER, n, a, 1, 1, desc, w, z, 1, 1,
                                            desc, dtype, &dwork, &hwork),
           "cusolverMpSyevd_bufferSize");
  // the layout step is the kernel layer's (natural block-cyclic)
  timed_batch(g, "syevd", pb.batch, dwork, hwork, /*factors=*/true, [&](int64_t k) {
    char *ak = a + k * entry, *wk = w + k * wsz, *zk = z + k * entry;
    cusolverStatus_t st =
        api().cusolverMpSyevd(ctx.handle, compz, CUBLAS_FILL_MODE_LOWER, n, ak, 1, 1, desc, wk, zk, 1, 1, desc, dtype,
                              ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(), ctx.host_work.size(), status + k);
    JAXMG_TRACE("syevd returned ", (int)st);
    finish_entry(g, pb, st, /*minor_above=*/false, status + k, wk, zk);
  });
}

// sygvd (type 1, vectors) on every batch entry: a and b destroyed, w, z.
void sygvd(GridCall& g, const Problem& pb, char* a, char* b, char* w, char* z, int32_t* status) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t n = pb.n, entry = pb.entry_bytes(), wsz = n * real_bytes(pb.dtype);
  cusolverMpMatrixDescriptor_t desc = pb.desc(ctx, /*row_major=*/true);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpSygvd_bufferSize(ctx.handle, CUSOLVER_EIG_TYPE_1, CUSOLVER_EIG_MODE_VECTOR,
                                            CUBLAS_FILL_MODE_LOWER, n, 1, 1, desc, 1, 1, desc, 1, 1, desc, dtype,
                                            &dwork, &hwork),
           "cusolverMpSygvd_bufferSize");
  timed_batch(g, "sygvd", pb.batch, dwork, hwork, /*factors=*/true, [&](int64_t k) {
    char *ak = a + k * entry, *bk = b + k * entry, *wk = w + k * wsz, *zk = z + k * entry;
    cusolverStatus_t st =
        api().cusolverMpSygvd(ctx.handle, CUSOLVER_EIG_TYPE_1, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, ak,
                              1, 1, desc, bk, 1, 1, desc, wk, zk, 1, 1, desc, dtype, ctx.work.ptr, ctx.work.bytes,
                              ctx.host_work.data(), ctx.host_work.size(), status + k);
    JAXMG_TRACE("sygvd returned ", (int)st);
    finish_entry(g, pb, st, /*minor_above=*/true, status + k, wk, zk);
  });
}

ffi::Error SyevdDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer a,
                         ffi::Result<ffi::AnyBuffer> work, ffi::Result<ffi::AnyBuffer> w, ffi::Result<ffi::AnyBuffer> z,
                         ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t n, int64_t tile, int64_t pr, int64_t pc,
                         int64_t mloc, int64_t nloc) {
  Problem pb{n, n, tile, pr, pc, mloc, nloc};
  if (ffi::Error e = check_problem(pb, a, *w, "jaxmg_syevd"); e.failure()) return e;
  if ((int64_t)status->element_count() != pb.batch || z->element_count() != a.element_count())
    return ffi::Error::InvalidArgument("jaxmg_syevd: one status per batch entry and z shaped like a expected");
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("syevd: n ", n, " tile ", tile, " grid ", pr, "x", pc, " batch ", pb.batch);
    copy_unless_aliased(*work, a, stream, "cudaMemcpyAsync(a to work)");
    syevd(g, pb, static_cast<char*>(work->untyped_data()), static_cast<char*>(w->untyped_data()),
          static_cast<char*>(z->untyped_data()), status->typed_data());
  });
}

ffi::Error SygvdDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer a, ffi::AnyBuffer b,
                         ffi::Result<ffi::AnyBuffer> work_a, ffi::Result<ffi::AnyBuffer> work_b,
                         ffi::Result<ffi::AnyBuffer> w, ffi::Result<ffi::AnyBuffer> z,
                         ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t n, int64_t tile, int64_t pr, int64_t pc,
                         int64_t mloc, int64_t nloc) {
  Problem pb{n, n, tile, pr, pc, mloc, nloc};
  if (ffi::Error e = check_problem(pb, a, *w, "jaxmg_sygvd"); e.failure()) return e;
  if (b.element_count() != a.element_count() || b.element_type() != a.element_type() ||
      (int64_t)status->element_count() != pb.batch)
    return ffi::Error::InvalidArgument("jaxmg_sygvd: b must be shaped and typed like a, one status per entry");
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("sygvd: n ", n, " tile ", tile, " grid ", pr, "x", pc, " batch ", pb.batch);
    copy_unless_aliased(*work_a, a, stream, "cudaMemcpyAsync(a to work)");
    copy_unless_aliased(*work_b, b, stream, "cudaMemcpyAsync(b to work)");
    sygvd(g, pb, static_cast<char*>(work_a->untyped_data()), static_cast<char*>(work_b->untyped_data()),
          static_cast<char*>(w->untyped_data()), static_cast<char*>(z->untyped_data()), status->typed_data());
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_syevd, SyevdDispatch,
                              layout_attrs(grid_bind()
                                               .Arg<ffi::AnyBuffer>()            // a: local block (batched)
                                               .Ret<ffi::AnyBuffer>()            // work (aliases a; destroyed)
                                               .Ret<ffi::AnyBuffer>()            // w: n real eigenvalues
                                               .Ret<ffi::AnyBuffer>()            // z: eigenvectors, like a
                                               .Ret<ffi::Buffer<ffi::S32>>()));  // status, agreed

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_sygvd, SygvdDispatch,
                              layout_attrs(grid_bind()
                                               .Arg<ffi::AnyBuffer>()            // a
                                               .Arg<ffi::AnyBuffer>()            // b (Hermitian positive definite)
                                               .Ret<ffi::AnyBuffer>()            // work a (aliases a)
                                               .Ret<ffi::AnyBuffer>()            // work b (aliases b: B's factor)
                                               .Ret<ffi::AnyBuffer>()            // w
                                               .Ret<ffi::AnyBuffer>()            // z, z^H B z = I
                                               .Ret<ffi::Buffer<ffi::S32>>()));  // status, agreed

}  // namespace jaxmg
