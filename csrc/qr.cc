// The QR family: jaxmg_geqrf (Householder QR in place: the factor, tau, status) and jaxmg_orgqr
// (the explicit Q of a saved factor, into a new buffer). Q^H b is applied by the kernel layer from
// the reflectors (jaxmg/kernels/native/qr.py).
//
// The local block is column-major (mloc x nloc, ld mloc) of the m x n matrix (m >= n) in square
// tiles on a pr x pc grid with the ROW-MAJOR rank mapping (rank = p * pc + q): the kernel layer
// (jaxmg/kernels/native/qr.py) keeps the mesh's own rows as cuSOLVERMp's process rows, because a
// QR factorization, unlike LU, cannot be taken of the transpose. tau is ScaLAPACK's: the local
// columns' scalars (nloc per batch entry), the same on every process row.
#include <utility>

#include "grid.h"

namespace jaxmg {
namespace {

using Problem = GridMatrix;  // m >= n

ffi::Error check_factor(Problem& pb, const ffi::AnyBuffer& a, int64_t tau_count, const char* who) {
  if (pb.m < pb.n) return ffi::Error::InvalidArgument(cat(who, ": ", pb.m, "x", pb.n, " is not tall (m >= n)"));
  if (ffi::Error e = pb.check(who, a); e.failure()) return e;
  if (tau_count != pb.batch * pb.nloc)
    return ffi::Error::InvalidArgument(cat(who, ": tau has ", tau_count, " entries, expected ", pb.batch * pb.nloc));
  return ffi::Error::Success();
}

// The bytes of one batch entry's tau (nloc scalars of the matrix's type).
int64_t tau_bytes(const Problem& pb) { return pb.nloc * elem_bytes(pb.dtype); }

// geqrf on every batch entry of `a` in place; tau (nloc per entry) and status (geqrf's info,
// agreed over the grid; a failed factor is filled with NaN). Rank deficiency is not a failure of
// geqrf: the kernel layer reads it from R's diagonal.
void geqrf(GridCall& g, const Problem& pb, char* a, char* tau, int32_t* status) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t entry = pb.entry_bytes();
  cusolverMpMatrixDescriptor_t desc = pb.desc(ctx, /*row_major=*/true);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpGeqrf_bufferSize(ctx.handle, pb.m, pb.n, a, 1, 1, desc, dtype, &dwork, &hwork),
           "cusolverMpGeqrf_bufferSize");
  // the kernel layer lays the matrix out
  timed_batch(g, "geqrf", pb.batch, dwork, hwork, /*factors=*/true, [&](int64_t k) {
    char* ak = a + k * entry;
    check_cuda(cudaMemsetAsync(status + k, 0, sizeof(int32_t), g.stream), "cudaMemsetAsync(status)");
    cusolverStatus_t st =
        api().cusolverMpGeqrf(ctx.handle, pb.m, pb.n, ak, 1, 1, desc, tau + k * tau_bytes(pb), dtype, ctx.work.ptr,
                              ctx.work.bytes, ctx.host_work.data(), ctx.host_work.size(), status + k);
    JAXMG_TRACE("geqrf returned ", (int)st);
    // A failed execution is a result (status n + 1, NaN outputs), not an exception, so that every
    // member takes the same path.
    const bool failed = failed_execution(st);
    if (st != CUSOLVER_STATUS_SUCCESS && !failed) check_mp(st, "cusolverMpGeqrf");
    if (failed) set_status(g, status + k, (int32_t)pb.n + 1);
    fill_failed(g, agree_status(g, status + k), {{ak, (size_t)entry}});
  });
}

// orgqr: q (a copy of the factor) becomes the explicit m x n Q, in place.
void orgqr(GridCall& g, const Problem& pb, const char* tau, char* q) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  Context& ctx = *g.ctx;
  cusolverMpMatrixDescriptor_t desc = pb.desc(ctx, /*row_major=*/true);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpOrgqr_bufferSize(ctx.handle, pb.m, pb.n, pb.n, q, 1, 1, desc, tau, dtype, &dwork, &hwork),
           "cusolverMpOrgqr_bufferSize");
  timed_batch(g, "orgqr", pb.batch, dwork, hwork, /*factors=*/false, [&](int64_t k) {
    check_mp(api().cusolverMpOrgqr(ctx.handle, pb.m, pb.n, pb.n, q + k * pb.entry_bytes(), 1, 1, desc,
                                   tau + k * tau_bytes(pb), dtype, ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(),
                                   ctx.host_work.size(), static_cast<int32_t*>(ctx.info.ptr)),
             "cusolverMpOrgqr");
    JAXMG_TRACE("orgqr issued");
  });
}

ffi::Error GeqrfDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer a,
                         ffi::Result<ffi::AnyBuffer> factor, ffi::Result<ffi::AnyBuffer> tau,
                         ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t m, int64_t n, int64_t tile, int64_t pr,
                         int64_t pc, int64_t mloc, int64_t nloc) {
  Problem pb{m, n, tile, pr, pc, mloc, nloc};
  if (ffi::Error e = check_factor(pb, a, (int64_t)tau->element_count(), "jaxmg_geqrf"); e.failure()) return e;
  if ((int64_t)status->element_count() != pb.batch || tau->element_type() != a.element_type())
    return ffi::Error::InvalidArgument("jaxmg_geqrf: one status per batch entry and tau of a's dtype expected");
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("geqrf: ", m, "x", n, " tile ", tile, " grid ", pr, "x", pc, " batch ", pb.batch);
    copy_unless_aliased(*factor, a, stream, "cudaMemcpyAsync(a to factor)");
    geqrf(g, pb, static_cast<char*>(factor->untyped_data()), static_cast<char*>(tau->untyped_data()),
          status->typed_data());
  });
}

ffi::Error OrgqrDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer f,
                         ffi::AnyBuffer tau, ffi::Result<ffi::AnyBuffer> q, int64_t m, int64_t n, int64_t tile,
                         int64_t pr, int64_t pc, int64_t mloc, int64_t nloc) {
  Problem pb{m, n, tile, pr, pc, mloc, nloc};
  if (ffi::Error e = check_factor(pb, f, (int64_t)tau.element_count(), "jaxmg_orgqr"); e.failure()) return e;
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("orgqr: ", m, "x", n, " tile ", tile, " grid ", pr, "x", pc, " batch ", pb.batch);
    copy_unless_aliased(*q, f, stream, "cudaMemcpyAsync(factor to q)");
    orgqr(g, pb, static_cast<const char*>(tau.untyped_data()), static_cast<char*>(q->untyped_data()));
  });
}

// The attributes every QR handler shares, after its operands and results.
template <typename B>
auto qr_attrs(B&& bind) {
  return layout_attrs(std::forward<B>(bind).template Attr<int64_t>("m"));  // global rows (padded), m >= n
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_geqrf, GeqrfDispatch,
                              qr_attrs(grid_bind()
                                           .Arg<ffi::AnyBuffer>()            // a: local block (batched)
                                           .Ret<ffi::AnyBuffer>()            // factor (aliases a)
                                           .Ret<ffi::AnyBuffer>()            // tau: nloc per entry
                                           .Ret<ffi::Buffer<ffi::S32>>()));  // status (info), agreed

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_orgqr, OrgqrDispatch,
                              qr_attrs(grid_bind()
                                           .Arg<ffi::AnyBuffer>()     // factor (read only)
                                           .Arg<ffi::AnyBuffer>()     // tau from jaxmg_geqrf
                                           .Ret<ffi::AnyBuffer>()));  // q: the explicit Q

}  // namespace jaxmg
