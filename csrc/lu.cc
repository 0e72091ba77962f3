// The LU family: jaxmg_getrf (factor in place, with pivots and status) and jaxmg_getrs (solve with
// a saved factor and its pivots, op(A) = A only: the kernel layer solves the transposed problem
// itself, see jaxmg/kernels/native/lu.py).
//
// The local block is column-major (mloc x nloc, ld mloc) on a pr x pc grid of square tiles; it is
// the block-cyclic layout of the matrix M' that cuSOLVERMp factors, M' = P L U. Pivots are
// cuSOLVERMp's (ScaLAPACK's): for each local row of this process row, the 1-based global row it
// was swapped with, the same on every process column. JAX arrays hold them as int32; cuSOLVERMp
// takes int64 (the family's cache converts).
#include <algorithm>
#include <utility>

#include "grid.h"
#include "layout.h"

namespace jaxmg {
namespace {

// The LU family's cache in each context: the int64 pivots cuSOLVERMp reads and writes.
struct LuCache : FamilyCache {
  DeviceBuffer pivots;
};

struct Problem : GridMatrix {  // m = n
  int64_t nrhs;
};

ffi::Error check_matrix(Problem& pb, const ffi::AnyBuffer& a, int64_t pivots_count, const char* who) {
  if (ffi::Error e = pb.check(who, a); e.failure()) return e;
  if (pivots_count != pb.batch * pb.mloc)
    return ffi::Error::InvalidArgument(
        cat(who, ": the pivots have ", pivots_count, " entries, expected ", pb.batch * pb.mloc));
  return ffi::Error::Success();
}

// cuSOLVERMp's int64 pivots for one batch entry (at least mloc + tile, as ScaLAPACK asks).
int64_t* pivot_buffer(GridCall& g, const Problem& pb) {
  LuCache& cache = g.ctx->family<LuCache>("lu");
  cache.pivots.ensure(sizeof(int64_t) * (size_t)(pb.mloc + pb.tile), "cudaMalloc(pivots)");
  return static_cast<int64_t*>(cache.pivots.ptr);
}

// getrf in place on every batch entry of `a`; pivots (int32, mloc per entry) and status (info:
// the first zero pivot, agreed over the grid). A failed factor is filled with NaN.
void getrf(GridCall& g, const Problem& pb, char* a, int32_t* pivots, int32_t* status) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t n = pb.n, entry = pb.entry_bytes();
  cusolverMpMatrixDescriptor_t desc = pb.desc(ctx);
  int64_t* ipiv = pivot_buffer(g, pb);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpGetrf_bufferSize(ctx.handle, n, n, a, 1, 1, desc, ipiv, dtype, &dwork, &hwork),
           "cusolverMpGetrf_bufferSize");
  // no layout step: the block layout is read as it is
  timed_batch(g, "getrf", pb.batch, dwork, hwork, /*factors=*/true, [&](int64_t k) {
    char* ak = a + k * entry;
    cusolverStatus_t st = api().cusolverMpGetrf(ctx.handle, n, n, ak, 1, 1, desc, ipiv, dtype, ctx.work.ptr,
                                                ctx.work.bytes, ctx.host_work.data(), ctx.host_work.size(), status + k);
    JAXMG_TRACE("getrf returned ", (int)st);
    // A singular matrix is a result (status = info, NaN outputs), not an exception, also where
    // cuSOLVERMp reports it as a failed execution (then n + 1 where info is not set).
    const bool singular = failed_execution(st);
    if (st != CUSOLVER_STATUS_SUCCESS && !singular) check_mp(st, "cusolverMpGetrf");
    if (singular) failure_status(g, status + k, (int32_t)n + 1);
    fill_failed(g, agree_status(g, status + k), {{ak, (size_t)entry}});
    check_cuda(pivots_to_int32(ipiv, pivots + k * pb.mloc, pb.mloc, g.stream), "pivots to int32");
  });
}

// getrs (op = N) with a saved factor and pivots on the right-hand sides x (mloc x nrhs local,
// process column 0), in place.
void getrs(GridCall& g, const Problem& pb, const char* f, const int32_t* pivots, char* x) {
  const cudaDataType dtype = cuda_type(pb.dtype);
  const int elem = elem_bytes(pb.dtype);
  Context& ctx = *g.ctx;
  const int64_t n = pb.n, bsz = pb.mloc * pb.nrhs;
  cusolverMpMatrixDescriptor_t desc_a = pb.desc(ctx);
  cusolverMpMatrixDescriptor_t desc_b =
      ctx.matrix_desc((int)pb.pr, (int)pb.pc, dtype, n, pb.nrhs, pb.tile, pb.nrhs, pb.mloc);
  int64_t* ipiv = pivot_buffer(g, pb);
  size_t dwork = 0, hwork = 0;
  check_mp(api().cusolverMpGetrs_bufferSize(ctx.handle, CUBLAS_OP_N, n, pb.nrhs, f, 1, 1, desc_a, ipiv, x, 1, 1, desc_b,
                                            dtype, &dwork, &hwork),
           "cusolverMpGetrs_bufferSize");
  timed_batch(g, "getrs", pb.batch, dwork, hwork, /*factors=*/false, [&](int64_t k) {
    check_cuda(pivots_to_int64(pivots + k * pb.mloc, ipiv, pb.mloc, g.stream), "pivots to int64");
    check_mp(api().cusolverMpGetrs(ctx.handle, CUBLAS_OP_N, n, pb.nrhs, f + k * pb.entry_bytes(), 1, 1, desc_a, ipiv,
                                   x + k * bsz * elem, 1, 1, desc_b, dtype, ctx.work.ptr, ctx.work.bytes,
                                   ctx.host_work.data(), ctx.host_work.size(), static_cast<int32_t*>(ctx.info.ptr)),
             "cusolverMpGetrs");
    JAXMG_TRACE("getrs issued");
  });
}

ffi::Error GetrfDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer a,
                         ffi::Result<ffi::AnyBuffer> factor, ffi::Result<ffi::Buffer<ffi::S32>> pivots,
                         ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t n, int64_t tile, int64_t pr, int64_t pc,
                         int64_t mloc, int64_t nloc) {
  Problem pb{{n, n, tile, pr, pc, mloc, nloc}, 1};
  if (ffi::Error e = check_matrix(pb, a, (int64_t)pivots->element_count(), "jaxmg_getrf"); e.failure()) return e;
  if ((int64_t)status->element_count() != pb.batch)
    return ffi::Error::InvalidArgument("jaxmg_getrf: one status per batch entry expected");
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("getrf: n ", n, " tile ", tile, " grid ", pr, "x", pc, " local ", mloc, "x", nloc, " batch ", pb.batch);
    copy_unless_aliased(*factor, a, stream, "cudaMemcpyAsync(a to factor)");
    getrf(g, pb, static_cast<char*>(factor->untyped_data()), pivots->typed_data(), status->typed_data());
  });
}

ffi::Error GetrsDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer f,
                         ffi::Buffer<ffi::S32> pivots, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> x, int64_t n,
                         int64_t tile, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc, int64_t nrhs) {
  Problem pb{{n, n, tile, pr, pc, mloc, nloc}, nrhs};
  if (ffi::Error e = check_matrix(pb, f, (int64_t)pivots.element_count(), "jaxmg_getrs"); e.failure()) return e;
  if ((int64_t)b.element_count() != pb.batch * mloc * nrhs || b.element_type() != f.element_type())
    return ffi::Error::InvalidArgument(cat("jaxmg_getrs: the right-hand side has ", b.element_count(),
                                           " elements (expected ", pb.batch * mloc * nrhs, ") or another dtype"));
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("getrs: n ", n, " tile ", tile, " grid ", pr, "x", pc, " nrhs ", nrhs, " batch ", pb.batch);
    copy_unless_aliased(*x, b, stream, "cudaMemcpyAsync(b to x)");
    getrs(g, pb, static_cast<const char*>(f.untyped_data()), pivots.typed_data(),
          static_cast<char*>(x->untyped_data()));
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_getrf, GetrfDispatch,
                              layout_attrs(grid_bind()
                                               .Arg<ffi::AnyBuffer>()            // a: local block (batched)
                                               .Ret<ffi::AnyBuffer>()            // factor (aliases a)
                                               .Ret<ffi::Buffer<ffi::S32>>()     // pivots: mloc per entry
                                               .Ret<ffi::Buffer<ffi::S32>>()));  // status (info), agreed

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_getrs, GetrsDispatch,
                              layout_attrs(grid_bind()
                                               .Arg<ffi::AnyBuffer>()         // factor (read only)
                                               .Arg<ffi::Buffer<ffi::S32>>()  // pivots from jaxmg_getrf
                                               .Arg<ffi::AnyBuffer>()         // b: local rhs rows
                                               .Ret<ffi::AnyBuffer>())        // x (aliases b)
                                  .Attr<int64_t>("nrhs"));                    // right-hand sides

}  // namespace jaxmg
