// The QR family: jaxmg_geqrf (Householder QR in place: the factor, tau, status), jaxmg_ormqr (Q or
// Q^H applied to right-hand sides in place, from a saved factor) and jaxmg_orgqr (the explicit Q
// of a saved factor, into a new buffer).
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

struct Problem {
  int64_t m, n, tile, pr, pc, mloc, nloc, nrhs = 0;
  int64_t batch = 1;         // leading batch (vmap) dimension, from the buffers
  DType dtype = DType::F64;  // the matrix's, from its buffer
};

ffi::Error check_factor(Problem& pb, const ffi::AnyBuffer& a, int64_t tau_count, const char* who) {
  if (ffi::Error e = check_dtype(who, a.element_type(), &pb.dtype); e.failure()) return e;
  if (ffi::Error e = check_batch(who, a, pb.mloc, pb.nloc, &pb.batch); e.failure()) return e;
  if (pb.m < pb.n) return ffi::Error::InvalidArgument(cat(who, ": ", pb.m, "x", pb.n, " is not tall (m >= n)"));
  if (ffi::Error e = check_extents(who, pb.m, pb.n, pb.tile, pb.pr, pb.pc, pb.mloc, pb.nloc); e.failure()) return e;
  if (tau_count != pb.batch * pb.nloc)
    return ffi::Error::InvalidArgument(cat(who, ": tau has ", tau_count, " entries, expected ", pb.batch * pb.nloc));
  return ffi::Error::Success();
}

cusolverMpMatrixDescriptor_t factor_desc(Context& ctx, const Problem& pb, cudaDataType dtype) {
  return ctx.matrix_desc((int)pb.pr, (int)pb.pc, dtype, pb.m, pb.n, pb.tile, pb.tile, pb.mloc, true);
}

// geqrf on every batch entry of `a` in place; tau (nloc per entry) and status (geqrf's info,
// agreed over the grid; a failed factor is filled with NaN). Rank deficiency is not a failure of
// geqrf: the kernel layer reads it from R's diagonal.
void geqrf(GridCall& g, const Problem& pb, char* a, char* tau, int32_t* status) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  const int elem = elem_bytes(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t mat = pb.mloc * pb.nloc;
  cusolverMpMatrixDescriptor_t desc = factor_desc(ctx, pb, dtype);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpGeqrf_bufferSize(ctx.handle, pb.m, pb.n, a, 1, 1, desc, dtype, &dwork, &hwork),
           "cusolverMpGeqrf_bufferSize");
  ctx.ensure_workspace(dwork, hwork);
  auto timed = std::make_unique<TimedCall>("geqrf");
  timed->start(g.stream);
  timed->laid_out(g.stream);  // the kernel layer lays the matrix out
  for (int64_t k = 0; k < pb.batch; ++k) {
    char* ak = a + k * mat * elem;
    check_cuda(cudaMemsetAsync(status + k, 0, sizeof(int32_t), g.stream), "cudaMemsetAsync(status)");
    cusolverStatus_t st = api().cusolverMpGeqrf(ctx.handle, pb.m, pb.n, ak, 1, 1, desc, tau + k * pb.nloc * elem,
                                                dtype, ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(),
                                                ctx.host_work.size(), status + k);
    JAXMG_TRACE("geqrf returned ", (int)st);
    // A failed execution is a result (status n + 1, NaN outputs), not an exception, so that every
    // member takes the same path.
    const bool failed = st == CUSOLVER_STATUS_INTERNAL_ERROR || st == CUSOLVER_STATUS_EXECUTION_FAILED;
    if (st != CUSOLVER_STATUS_SUCCESS && !failed) check_mp(st, "cusolverMpGeqrf");
    if (failed) {
      const int32_t v = (int32_t)pb.n + 1;
      check_cuda(cudaMemcpy(status + k, &v, sizeof(v), cudaMemcpyHostToDevice), "cudaMemcpy(status)");
    }
    if (agree_status(g, status + k) != 0)
      check_cuda(cudaMemsetAsync(ak, 0xFF, (size_t)(mat * elem), g.stream), "cudaMemsetAsync(failed factor)");
    if (k == 0) timed->factor_done(g.stream);
  }
  record_timing(g.device, std::move(timed), g.stream);
}

// The workspaces of a call that reads the saved factor, then `call(k, info)` for every batch entry
// k, timed as `kind` (info: a device status word the call may write; not a result).
template <typename Call>
void each_entry(GridCall& g, const char* kind, int64_t batch, size_t dwork, size_t hwork, Call call) {
  Context& ctx = *g.ctx;
  ctx.ensure_workspace(dwork, hwork);
  ctx.info.ensure(sizeof(int32_t) * 4, "cudaMalloc(info)");
  auto timed = std::make_unique<TimedCall>(kind);
  timed->start(g.stream);
  timed->laid_out(g.stream);
  for (int64_t k = 0; k < batch; ++k) {
    call(k, static_cast<int32_t*>(ctx.info.ptr));
    JAXMG_TRACE(kind, " issued");
  }
  record_timing(g.device, std::move(timed), g.stream);
}

// ormqr (side = left) with a saved factor: c = op(Q) c, op = N or the conjugate transpose; c is
// m x nrhs, rows block-cyclic in tiles of `tile`, all columns on process column 0 (mloc x nrhs
// local, column-major; other process columns' buffers are not read).
void ormqr(GridCall& g, const Problem& pb, bool adjoint, const char* f, const char* tau, char* c) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  const int elem = elem_bytes(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t mat = pb.mloc * pb.nloc, csz = pb.mloc * pb.nrhs;
  const cublasOperation_t op = !adjoint ? CUBLAS_OP_N : (is_complex(pb.dtype) ? CUBLAS_OP_C : CUBLAS_OP_T);
  cusolverMpMatrixDescriptor_t desc_a = factor_desc(ctx, pb, dtype);
  cusolverMpMatrixDescriptor_t desc_c =
      ctx.matrix_desc((int)pb.pr, (int)pb.pc, dtype, pb.m, pb.nrhs, pb.tile, pb.nrhs, pb.mloc, true);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpOrmqr_bufferSize(ctx.handle, CUBLAS_SIDE_LEFT, op, pb.m, pb.nrhs, pb.n, f, 1, 1, desc_a,
                                            tau, c, 1, 1, desc_c, dtype, &dwork, &hwork),
           "cusolverMpOrmqr_bufferSize");
  each_entry(g, "ormqr", pb.batch, dwork, hwork, [&](int64_t k, int32_t* info) {
    check_mp(api().cusolverMpOrmqr(ctx.handle, CUBLAS_SIDE_LEFT, op, pb.m, pb.nrhs, pb.n, f + k * mat * elem, 1, 1,
                                   desc_a, tau + k * pb.nloc * elem, c + k * csz * elem, 1, 1, desc_c, dtype,
                                   ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(), ctx.host_work.size(), info),
             "cusolverMpOrmqr");
  });
}

// orgqr: q (a copy of the factor) becomes the explicit m x n Q, in place.
void orgqr(GridCall& g, const Problem& pb, const char* tau, char* q) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  const int elem = elem_bytes(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t mat = pb.mloc * pb.nloc;
  cusolverMpMatrixDescriptor_t desc = factor_desc(ctx, pb, dtype);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpOrgqr_bufferSize(ctx.handle, pb.m, pb.n, pb.n, q, 1, 1, desc, tau, dtype, &dwork, &hwork),
           "cusolverMpOrgqr_bufferSize");
  each_entry(g, "orgqr", pb.batch, dwork, hwork, [&](int64_t k, int32_t* info) {
    check_mp(api().cusolverMpOrgqr(ctx.handle, pb.m, pb.n, pb.n, q + k * mat * elem, 1, 1, desc,
                                   tau + k * pb.nloc * elem, dtype, ctx.work.ptr, ctx.work.bytes,
                                   ctx.host_work.data(), ctx.host_work.size(), info),
             "cusolverMpOrgqr");
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
  try {
    GridCall g = open_grid(stream, members, id, rank, pr, pc);
    JAXMG_TRACE("geqrf: ", m, "x", n, " tile ", tile, " grid ", pr, "x", pc, " batch ", pb.batch);
    copy_unless_aliased(*factor, a, stream, "cudaMemcpyAsync(a to factor)");
    geqrf(g, pb, static_cast<char*>(factor->untyped_data()), static_cast<char*>(tau->untyped_data()),
          status->typed_data());
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

ffi::Error OrmqrDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer f,
                         ffi::AnyBuffer tau, ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> x, int64_t m, int64_t n,
                         int64_t tile, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc, int64_t nrhs,
                         int64_t adjoint) {
  Problem pb{m, n, tile, pr, pc, mloc, nloc, nrhs};
  if (ffi::Error e = check_factor(pb, f, (int64_t)tau.element_count(), "jaxmg_ormqr"); e.failure()) return e;
  if ((int64_t)c.element_count() != pb.batch * mloc * nrhs || c.element_type() != f.element_type())
    return ffi::Error::InvalidArgument(cat("jaxmg_ormqr: the right-hand side has ", c.element_count(),
                                           " elements (expected ", pb.batch * mloc * nrhs, ") or another dtype"));
  try {
    GridCall g = open_grid(stream, members, id, rank, pr, pc);
    JAXMG_TRACE("ormqr: ", m, "x", n, " tile ", tile, " grid ", pr, "x", pc, " nrhs ", nrhs, " adjoint ", adjoint);
    copy_unless_aliased(*x, c, stream, "cudaMemcpyAsync(c to x)");
    ormqr(g, pb, adjoint != 0, static_cast<const char*>(f.untyped_data()), static_cast<const char*>(tau.untyped_data()),
          static_cast<char*>(x->untyped_data()));
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

ffi::Error OrgqrDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer f,
                         ffi::AnyBuffer tau, ffi::Result<ffi::AnyBuffer> q, int64_t m, int64_t n, int64_t tile,
                         int64_t pr, int64_t pc, int64_t mloc, int64_t nloc) {
  Problem pb{m, n, tile, pr, pc, mloc, nloc};
  if (ffi::Error e = check_factor(pb, f, (int64_t)tau.element_count(), "jaxmg_orgqr"); e.failure()) return e;
  try {
    GridCall g = open_grid(stream, members, id, rank, pr, pc);
    JAXMG_TRACE("orgqr: ", m, "x", n, " tile ", tile, " grid ", pr, "x", pc, " batch ", pb.batch);
    copy_unless_aliased(*q, f, stream, "cudaMemcpyAsync(factor to q)");
    orgqr(g, pb, static_cast<const char*>(tau.untyped_data()), static_cast<char*>(q->untyped_data()));
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return to_error(e);
  }
}

// The attributes every QR handler shares, after its operands and results.
template <typename B>
auto qr_attrs(B&& bind) {
  return layout_attrs(std::forward<B>(bind).template Attr<int64_t>("m"));  // global rows (padded), m >= n
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_geqrf, GeqrfDispatch,
                              qr_attrs(grid_bind()
                                           .Arg<ffi::AnyBuffer>()             // a: local block (batched)
                                           .Ret<ffi::AnyBuffer>()             // factor (aliases a)
                                           .Ret<ffi::AnyBuffer>()             // tau: nloc per entry
                                           .Ret<ffi::Buffer<ffi::S32>>()));   // status (info), agreed

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_ormqr, OrmqrDispatch,
                              qr_attrs(grid_bind()
                                           .Arg<ffi::AnyBuffer>()             // factor (read only)
                                           .Arg<ffi::AnyBuffer>()             // tau from jaxmg_geqrf
                                           .Arg<ffi::AnyBuffer>()             // c: local rows (nrhs x mloc)
                                           .Ret<ffi::AnyBuffer>())            // op(Q) c (aliases c)
                                  .Attr<int64_t>("nrhs")                      // right-hand sides
                                  .Attr<int64_t>("adjoint"));                 // 1: Q^H, 0: Q (the kernel
                                                                              // layer's attributes are int64)

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_orgqr, OrgqrDispatch,
                              qr_attrs(grid_bind()
                                           .Arg<ffi::AnyBuffer>()             // factor (read only)
                                           .Arg<ffi::AnyBuffer>()             // tau from jaxmg_geqrf
                                           .Ret<ffi::AnyBuffer>()));          // q: the explicit Q

}  // namespace jaxmg
