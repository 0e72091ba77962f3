// The Cholesky family: jaxmg_potrf (factor, and optionally solve, in place) and jaxmg_potrs (solve
// and the local log det with a saved factor), the symmetrization plans of the in-place layout,
// and the choice of the tiled solve (trsolve.h) on 1 x P grids.
#include <algorithm>
#include <utility>

#include "codes.h"
#include "grid.h"
#include "layout.h"
#include "trsolve.h"

namespace jaxmg {
namespace {

// Plan for filling the strictly lower triangle of a Hermitian matrix M (upper triangle valid),
// where the permuted factorization reads it (the strictly lower part of diagonal tiles, and the
// lower tiles that land in the permuted lower triangle: about half of them), in a
// block layout (process (p, q) owns rows [p*mloc, ...) and columns [q*nloc, ...), column-major
// local blocks, ld = mloc) from the conjugate transposes of the upper tiles, with NCCL
// point-to-point for tiles owned by another process. Source and destination tiles never
// overlap (one is strictly upper, the other strictly lower), so it runs in place.
struct SymPlan {
  DeviceBuffer offsets;             // int64 pairs, see below
  int64_t n_local = 0, n_diag = 0;  // local pairs first, then diagonal tiles
  struct Chunk {
    int peer, slot;
    int64_t send_at, send_n, recv_at, recv_n;
  };
  std::vector<std::vector<Chunk>> rounds;
  int64_t chunk_tiles = 1;
  int npeers = 0;
  DeviceBuffer cycles;  // sigma's cycles, where a 1 x P grid's row tiles are permuted (sigma_cycles)
  int64_t cycles_len = 0;
};

// The Cholesky family's cache in each context: symmetrization plans by problem, and the tiled
// solve's workspace.
struct CholeskyCache : FamilyCache {
  std::map<std::string, std::unique_ptr<SymPlan>> plans;
  DeviceBuffer tiled;  // the tiled solve's workspace (trsolve.h)
};

// The tiles one member's symmetrization moves, as offsets into its local block: local (source,
// destination) pairs, diagonal tiles (offset, 0), and per peer the tiles it sends and receives.
struct TileMoves {
  std::vector<int64_t> local, diag;
  std::vector<std::vector<int64_t>> send, recv;  // per peer: source / destination offsets
  std::vector<int64_t> count;                    // tiles from src to dst, at src * nranks + dst
};

TileMoves tile_moves(int64_t n, int64_t T, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc, int rank) {
  const int64_t K = n / T, kr = mloc / T, kc = nloc / T, nranks = pr * pc;
  auto owner = [&](int64_t R, int64_t C) { return (R / kr) + (C / kc) * pr; };
  auto offset = [&](int64_t R, int64_t C) { return (R % kr) * T + (C % kc) * T * mloc; };
  // Block tile R is tile cyclic(R) of the permuted matrix S^T M S (P processes along the
  // permuted dimension(s); the identity on a 1x1 grid). cuSOLVERMp (uplo=LOWER) reads only the
  // permuted lower triangle: a lower tile (R, C) of M needs filling only where it lands there.
  const int64_t P = std::max(pr, pc), kp = K / P;
  auto cyclic = [&](int64_t R) { return (R % kp) * P + R / kp; };
  TileMoves mv;
  mv.send.resize(nranks);
  mv.recv.resize(nranks);
  mv.count.assign(nranks * nranks, 0);
  for (int64_t R = 0; R < K; ++R) {
    for (int64_t C = 0; C <= R; ++C) {
      int64_t d = owner(R, C), s = owner(C, R);
      if (R == C) {
        if (d == rank) mv.diag.insert(mv.diag.end(), {offset(R, C), 0});
        continue;
      }
      if (cyclic(R) < cyclic(C)) continue;  // lands in the permuted upper triangle: never read
      if (d == s) {
        if (d == rank) mv.local.insert(mv.local.end(), {offset(C, R), offset(R, C)});
        continue;
      }
      mv.count[s * nranks + d] += 1;
      if (d == rank) mv.recv[s].push_back(offset(R, C));
      if (s == rank) mv.send[d].push_back(offset(C, R));
    }
  }
  return mv;
}

// The exchange rounds of `mv` in chunks of at most plan.chunk_tiles tiles per peer; their offset
// pairs are appended to `all` (pack: source in a -> send slot; unpack: receive slot -> a).
void plan_rounds(SymPlan& plan, const TileMoves& mv, int rank, int64_t nranks, int64_t T, std::vector<int64_t>& all) {
  int64_t nrounds = 0;
  for (int64_t c : mv.count) nrounds = std::max(nrounds, (c + plan.chunk_tiles - 1) / plan.chunk_tiles);
  plan.rounds.resize(nrounds);
  const int64_t slot = plan.chunk_tiles * T * T;  // elements per peer slot in each of send/recv halves
  for (int64_t k = 0; k < nrounds; ++k) {
    int slot_index = 0;
    for (int peer = 0; peer < nranks; ++peer) {
      if (peer == rank) continue;
      SymPlan::Chunk ch{peer, slot_index, 0, 0, 0, 0};
      const int64_t s0 = k * plan.chunk_tiles;
      auto in_round = [&](const std::vector<int64_t>& v) {
        return std::max<int64_t>(0, std::min<int64_t>(plan.chunk_tiles, (int64_t)v.size() - s0));
      };
      ch.send_at = (int64_t)all.size() / 2;
      ch.send_n = in_round(mv.send[peer]);
      for (int64_t t = 0; t < ch.send_n; ++t)
        all.insert(all.end(), {mv.send[peer][s0 + t], slot_index * slot + t * T * T});
      ch.recv_at = (int64_t)all.size() / 2;
      ch.recv_n = in_round(mv.recv[peer]);
      for (int64_t t = 0; t < ch.recv_n; ++t)
        all.insert(all.end(), {slot_index * slot + t * T * T, mv.recv[peer][s0 + t]});
      if (ch.send_n || ch.recv_n) plan.rounds[k].push_back(ch);
      ++slot_index;
    }
  }
}

// Copies `host` (count elements of `bytes_each`) into a new device buffer `dst`.
void upload(DeviceBuffer& dst, const void* host, size_t count, size_t bytes_each, cudaStream_t stream,
            const char* what) {
  if (!count) return;
  dst.ensure(count * bytes_each, what);
  check_cuda(cudaMemcpyAsync(dst.ptr, host, count * bytes_each, cudaMemcpyHostToDevice, stream), what);
}

std::unique_ptr<SymPlan> make_sym_plan(int64_t n, int64_t T, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc,
                                       int rank, int64_t scratch_elems, cudaStream_t stream) {
  auto plan = std::make_unique<SymPlan>();
  const int64_t nranks = pr * pc;
  const TileMoves mv = tile_moves(n, T, pr, pc, mloc, nloc, rank);
  plan->npeers = (int)std::max<int64_t>(1, nranks - 1);
  plan->chunk_tiles = std::max<int64_t>(1, scratch_elems / (2 * plan->npeers * T * T));
  std::vector<int64_t> all(mv.local);
  plan->n_local = (int64_t)mv.local.size() / 2;
  all.insert(all.end(), mv.diag.begin(), mv.diag.end());
  plan->n_diag = (int64_t)mv.diag.size() / 2;
  plan_rounds(*plan, mv, rank, nranks, T, all);
  upload(plan->offsets, all.data(), all.size(), sizeof(int64_t), stream, "cudaMemcpyAsync(layout plan)");
  const std::vector<int32_t> cycles = pr == 1 && pc > 1 ? sigma_cycles(n / T, pc) : std::vector<int32_t>();
  plan->cycles_len = (int64_t)cycles.size();
  upload(plan->cycles, cycles.data(), cycles.size(), sizeof(int32_t), stream, "cudaMemcpyAsync(layout cycles)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the host vectors go now
  return plan;
}

void run_sym_plan(const SymPlan& plan, ncclComm_t comm, char* a, int64_t ld, int64_t T, DType dtype, char* scratch,
                  cudaStream_t stream) {
  const int64_t* offs = static_cast<const int64_t*>(plan.offsets.ptr);
  const int elem = elem_bytes(dtype);
  check_cuda(copy_tiles(a, ld, a, ld, offs, plan.n_local, T, dtype, true, stream), "copy_tiles(local)");
  check_cuda(symmetrize_diag_tiles(a, ld, offs + 2 * plan.n_local, plan.n_diag, T, dtype, stream),
             "symmetrize_diag_tiles");
  const int64_t slot_elems = plan.chunk_tiles * T * T;
  char* send_base = scratch;
  char* recv_base = scratch + plan.npeers * slot_elems * elem;
  for (const auto& round : plan.rounds) {
    for (const auto& ch : round)
      check_cuda(copy_tiles(a, ld, send_base, T, offs + 2 * ch.send_at, ch.send_n, T, dtype, true, stream),
                 "copy_tiles(pack)");
    check_nccl(api().ncclGroupStart(), "ncclGroupStart");
    for (const auto& ch : round) {
      size_t bytes_s = (size_t)(ch.send_n * T * T * elem), bytes_r = (size_t)(ch.recv_n * T * T * elem);
      if (bytes_s)
        check_nccl(api().ncclSend(send_base + ch.slot * slot_elems * elem, bytes_s, ncclUint8, ch.peer, comm, stream),
                   "ncclSend");
      if (bytes_r)
        check_nccl(api().ncclRecv(recv_base + ch.slot * slot_elems * elem, bytes_r, ncclUint8, ch.peer, comm, stream),
                   "ncclRecv");
    }
    check_nccl(api().ncclGroupEnd(), "ncclGroupEnd");
    for (const auto& ch : round)
      check_cuda(copy_tiles(recv_base, T, a, ld, offs + 2 * ch.recv_at, ch.recv_n, T, dtype, false, stream),
                 "copy_tiles(unpack)");
  }
}

// The attributes both handlers take (see csrc/README.md).
struct Problem : GridMatrix {  // m = n
  int64_t nrhs, mode, solve, uplo;
};

// The in-place layout step (mode 1): fill the tiles of the missing triangle that the permuted
// factorization reads and, on a 1-D grid, permute local tiles, so that the block layout is the
// block-cyclic layout of S^T M S.
void lay_out(GridCall& g, CholeskyCache& cc, const Problem& pb, char* a) {
  const int64_t pr = pb.pr, pc = pb.pc, mat = pb.mloc * pb.nloc;
  const int elem = elem_bytes(pb.dtype);
  if (pr > 1 && pc > 1 && pr != pc)
    throw Failure(cat("jaxmg native: the in-place layout needs a square or 1-D grid, got ", pr, "x", pc));
  Context& ctx = *g.ctx;
  const int64_t npeers = std::max<int64_t>(1, pr * pc - 1);
  const int64_t scratch_elems =
      std::max<int64_t>(std::min<int64_t>(mat, (int64_t)32 << 20), 2 * npeers * pb.tile * pb.tile);
  ctx.scratch.ensure((size_t)scratch_elems * elem, "cudaMalloc(layout scratch)");
  auto& slot = cc.plans[cat(pr, "x", pc, ":", pb.n, ":", pb.tile, ":", pb.mloc, ":", scratch_elems)];
  if (!slot) slot = make_sym_plan(pb.n, pb.tile, pr, pc, pb.mloc, pb.nloc, g.rank, scratch_elems, g.stream);
  const bool reorder = (pr == 1 && pc > 1) || (pc == 1 && pr > 1);
  for (int64_t k = 0; k < pb.batch; ++k) {
    char* ak = a + k * mat * elem;
    run_sym_plan(*slot, ctx.comm, ak, pb.mloc, pb.tile, pb.dtype, static_cast<char*>(ctx.scratch.ptr), g.stream);
    JAXMG_TRACE("symmetrized (", slot->rounds.size(), " exchange rounds)");
    if (reorder) {
      cudaError_t e = (pr == 1)
                          ? permute_row_tiles(ak, elem, pb.nloc, pb.mloc, pb.tile,
                                              static_cast<const int32_t*>(slot->cycles.ptr), slot->cycles_len, g.stream)
                          : reorder_col_tiles(ak, elem, pb.mloc, pb.nloc, pb.mloc, pb.tile, pr, ctx.scratch.ptr,
                                              scratch_elems, g.stream);
      check_cuda(e, "local tile reorder");
    }
  }
}

// potrs with the lower factor on a 1 x P grid: the tiled solve (trsolve.h) up to
// kTiledSolveMaxTiles tiles, where it is faster than cuSOLVERMp's potrs, cuSOLVERMp's beyond.
// Needs cuBLAS.
bool use_tiled_solve(const Problem& pb, cublasFillMode_t fill) {
  constexpr int64_t kTiledSolveMaxTiles = 8;
  return pb.solve && pb.pr == 1 && fill == CUBLAS_FILL_MODE_LOWER && tiled_solve_available() &&
         pb.n / pb.tile <= kTiledSolveMaxTiles;
}

// potrf on one batch entry `ak`, in place. Its status (info; n + 1 where cuSOLVERMp fails without
// it) is agreed over the grid, so that every member skips or runs potrs alike. Returns whether
// it failed; a failed factor is then NaN everywhere (all-ones bytes are a NaN in every floating
// type), so whatever consumes it (solves, log det) gives NaN, not a partial factor's numbers.
bool factor_entry(GridCall& g, const Problem& pb, cublasFillMode_t fill, cusolverMpMatrixDescriptor_t desc_a, char* ak,
                  int32_t* status) {
  Context& ctx = *g.ctx;
  cusolverStatus_t st =
      api().cusolverMpPotrf(ctx.handle, fill, pb.n, ak, 1, 1, desc_a, cuda_type(pb.dtype), ctx.work.ptr, ctx.work.bytes,
                            ctx.host_work.data(), ctx.host_work.size(), status);
  JAXMG_TRACE("potrf returned ", (int)st);
  // cuSOLVERMp 0.8 reports a matrix that is not positive definite as an internal error (and
  // info > 0): that is a result (status != 0, NaN outputs), not an exception.
  const bool not_pd = failed_execution(st);
  if (st != CUSOLVER_STATUS_SUCCESS && !not_pd) check_mp(st, "cusolverMpPotrf");
  if (not_pd) failure_status(g, status, (int32_t)pb.n + 1);
  return fill_failed(g, agree_status(g, status), {{ak, (size_t)pb.entry_bytes()}});
}

// cuSOLVERMp's workspaces for the call: potrf's where it factors, potrs's where it solves with
// cuSOLVERMp (not the tiled solve).
void size_workspace(GridCall& g, const Problem& pb, cublasFillMode_t fill, cusolverMpMatrixDescriptor_t desc_a,
                    cusolverMpMatrixDescriptor_t desc_b, char* a, char* x, bool factor, bool tiled) {
  const Context& ctx = *g.ctx;
  const cudaDataType dtype = cuda_type(pb.dtype);
  size_t dwork = 0, hwork = 0;
  if (factor) {
    check_mp(api().cusolverMpPotrf_bufferSize(ctx.handle, fill, pb.n, a, 1, 1, desc_a, dtype, &dwork, &hwork),
             "cusolverMpPotrf_bufferSize");
  }
  if (pb.solve && !tiled) {
    size_t d2 = 0, h2 = 0;
    check_mp(api().cusolverMpPotrs_bufferSize(ctx.handle, fill, pb.n, pb.nrhs, a, 1, 1, desc_a, x, 1, 1, desc_b, dtype,
                                              &d2, &h2),
             "cusolverMpPotrs_bufferSize");
    dwork = std::max(dwork, d2);
    hwork = std::max(hwork, h2);
  }
  g.ctx->ensure_workspace(dwork, hwork);
}

// The one implementation behind both handlers:
//   factor: potrf on the local column-major block (mloc x nloc, ld mloc) of the n x n matrix on a
//           pr x pc grid with tile x tile blocks, batched over leading dimensions;
//           mode 0: the block is already block-cyclic (natural order of the padded matrix);
//           mode 1: the block is a block of a block layout of a Hermitian matrix whose `uplo`-
//                   opposite triangle is unset: lay_out makes it the block-cyclic layout of
//                   S^T M S (see jaxmg/kernels/native/cholesky.py);
//   solve:  potrs with the factor on the right-hand sides x (mloc x nrhs local, process column 0);
//   always: the local part of log det (sum of log of the owned diagonal entries).
// `a` holds the factor (factored in place when `factor`), `status` one int32 per batch entry.
void potrf_potrs(GridCall& g, const Problem& pb, char* a, char* x, void* logdet, int32_t* status, bool factor) {
  Context& ctx = *g.ctx;
  CholeskyCache& cc = ctx.family<CholeskyCache>("cholesky");
  const cudaDataType dtype = cuda_type(pb.dtype);
  const int elem = elem_bytes(pb.dtype);
  const int64_t n = pb.n, tile = pb.tile, mat = pb.mloc * pb.nloc, bsz = pb.mloc * pb.nrhs;
  const cublasFillMode_t fill = pb.uplo == codes::uplo_upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
  const int pr = (int)pb.pr, pc = (int)pb.pc;
  cusolverMpMatrixDescriptor_t desc_a = pb.desc(ctx);
  cusolverMpMatrixDescriptor_t desc_b = ctx.matrix_desc(pr, pc, dtype, n, pb.nrhs, tile, pb.nrhs, pb.mloc);
  const bool tiled = use_tiled_solve(pb, fill);
  size_workspace(g, pb, fill, desc_a, desc_b, a, x, factor, tiled);

  auto timed = std::make_unique<TimedCall>(factor ? "potrf" : "potrs");
  timed->start(g.stream);
  if (factor && pb.mode == codes::cholesky_in_place) lay_out(g, cc, pb, a);
  timed->laid_out(g.stream);
  for (int64_t k = 0; k < pb.batch; ++k) {
    char* ak = a + k * mat * elem;
    const bool failed = factor && factor_entry(g, pb, fill, desc_a, ak, status + k);
    if (factor && k == 0) timed->factor_done(g.stream);
    if (pb.solve && !failed && tiled) {
      tiled_potrs(cc.tiled, ctx.comm, pb.dtype, ak, x + k * bsz * elem, n, tile, pc, g.rank, pb.nrhs, g.stream);
      JAXMG_TRACE("tiled potrs issued");
    } else if (pb.solve && !failed) {
      check_mp(api().cusolverMpPotrs(ctx.handle, fill, n, pb.nrhs, ak, 1, 1, desc_a, x + k * bsz * elem, 1, 1, desc_b,
                                     dtype, ctx.work.ptr, ctx.work.bytes, ctx.host_work.data(), ctx.host_work.size(),
                                     static_cast<int32_t*>(ctx.info.ptr)),
               "cusolverMpPotrs");
      JAXMG_TRACE("potrs issued");
    }
  }
  record_timing(g.device, std::move(timed), g.stream);
  if (debug_enabled()) {
    check_cuda(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize(debug)");
    JAXMG_TRACE("stream synchronized after cuSOLVERMp");
  }
  if (!factor) check_cuda(fill_int32(status, pb.batch, 0, g.stream), "fill status");
  for (int64_t k = 0; k < pb.batch; ++k)
    check_cuda(local_logdet(a + k * mat * elem, pb.dtype, pb.mloc, n, tile, pr, pc, g.p, g.q,
                            static_cast<char*>(logdet) + k * real_bytes(pb.dtype), g.stream),
               "log det kernel");
}

// Dispatch's checks, as LU's and QR's: the dtype, the batch from the buffers' extents, and
// InvalidArgument for extents that do not match the attributes (the n x n matrix in whole tiles
// on the pr x pc grid, nrhs right-hand sides of the matrix's dtype, one log det of its real type
// and one status per batch entry).
ffi::Error check_problem(Problem& pb, const ffi::AnyBuffer& a, const ffi::AnyBuffer& b, const ffi::AnyBuffer& logdet,
                         const ffi::Buffer<ffi::S32>& status, const char* who) {
  if (ffi::Error e = pb.check(who, a); e.failure()) return e;
  if (b.element_type() != a.element_type())
    return ffi::Error::InvalidArgument(cat(who, ": the right-hand side's dtype differs from the matrix's"));
  if (pb.solve && (pb.nrhs <= 0 || (int64_t)b.element_count() != pb.batch * pb.mloc * pb.nrhs))
    return ffi::Error::InvalidArgument(cat(who, ": the right-hand side has ", b.element_count(), " elements, expected ",
                                           pb.batch * pb.mloc * pb.nrhs, " (nrhs = ", pb.nrhs, ")"));
  const ffi::DataType real = real_bytes(pb.dtype) == 4 ? ffi::DataType::F32 : ffi::DataType::F64;
  if ((int64_t)logdet.element_count() != pb.batch || logdet.element_type() != real ||
      (int64_t)status.element_count() != pb.batch)
    return ffi::Error::InvalidArgument(cat(who,
                                           ": one log det of the matrix's real type and one status per batch "
                                           "entry expected, got ",
                                           logdet.element_count(), " and ", status.element_count(), " for ", pb.batch,
                                           " entries"));
  return ffi::Error::Success();
}

// potrf (and potrs) in place: a -> factor, b -> x.
ffi::Error PotrfDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer a, ffi::AnyBuffer b,
                         ffi::Result<ffi::AnyBuffer> factor, ffi::Result<ffi::AnyBuffer> x,
                         ffi::Result<ffi::AnyBuffer> logdet, ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t n,
                         int64_t tile, int64_t pr, int64_t pc, int64_t mloc, int64_t nloc, int64_t nrhs, int64_t mode,
                         int64_t solve, int64_t uplo) {
  Problem pb{{n, n, tile, pr, pc, mloc, nloc}, nrhs, mode, solve, uplo};
  if (ffi::Error e = check_problem(pb, a, b, *logdet, *status, "jaxmg_potrf"); e.failure()) return e;
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("potrf: n ", n, " tile ", tile, " grid ", pr, "x", pc, " local ", mloc, "x", nloc, " nrhs ", nrhs,
                " mode ", mode, " uplo ", uplo, " batch ", pb.batch);
    copy_unless_aliased(*factor, a, stream, "cudaMemcpyAsync(a to factor)");
    if (solve) copy_unless_aliased(*x, b, stream, "cudaMemcpyAsync(b to x)");
    potrf_potrs(g, pb, static_cast<char*>(factor->untyped_data()), static_cast<char*>(x->untyped_data()),
                logdet->untyped_data(), status->typed_data(), /*factor=*/true);
  });
}

// potrs (and log det) with a factor made by jaxmg_potrf: the factor is only read.
ffi::Error PotrsDispatch(cudaStream_t stream, Members members, NcclId id, Rank rank, ffi::AnyBuffer f, ffi::AnyBuffer b,
                         ffi::Result<ffi::AnyBuffer> x, ffi::Result<ffi::AnyBuffer> logdet,
                         ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t n, int64_t tile, int64_t pr, int64_t pc,
                         int64_t mloc, int64_t nloc, int64_t nrhs, int64_t mode, int64_t solve, int64_t uplo) {
  Problem pb{{n, n, tile, pr, pc, mloc, nloc}, nrhs, mode, solve, uplo};
  if (ffi::Error e = check_problem(pb, f, b, *logdet, *status, "jaxmg_potrs"); e.failure()) return e;
  return on_grid(stream, members, id, rank, pr, pc, [&](GridCall& g) {
    JAXMG_TRACE("potrs: n ", n, " tile ", tile, " grid ", pr, "x", pc, " nrhs ", nrhs, " batch ", pb.batch);
    if (solve) copy_unless_aliased(*x, b, stream, "cudaMemcpyAsync(b to x)");
    // read only: potrs and the log-det kernel
    potrf_potrs(g, pb, static_cast<char*>(const_cast<void*>(f.untyped_data())), static_cast<char*>(x->untyped_data()),
                logdet->untyped_data(), status->typed_data(), /*factor=*/false);
  });
}

// The attributes of both handlers, after their operands and results.
template <typename B>
auto cholesky_attrs(B&& bind) {
  return layout_attrs(std::forward<B>(bind))
      .template Attr<int64_t>("nrhs")   // right-hand sides
      .template Attr<int64_t>("mode")   // 0: natural block-cyclic, 1: in-place block layout
      .template Attr<int64_t>("solve")  // 1: solve with b
      .template Attr<int64_t>("uplo");  // 0: lower, 1: upper
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_potrf, PotrfDispatch,
                              cholesky_attrs(grid_bind()
                                                 .Arg<ffi::AnyBuffer>()            // a: local block (batched)
                                                 .Arg<ffi::AnyBuffer>()            // b: local rhs rows
                                                 .Ret<ffi::AnyBuffer>()            // factor (aliases a)
                                                 .Ret<ffi::AnyBuffer>()            // x (aliases b)
                                                 .Ret<ffi::AnyBuffer>()            // local part of log det
                                                 .Ret<ffi::Buffer<ffi::S32>>()));  // status, agreed

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_potrs, PotrsDispatch,
                              cholesky_attrs(grid_bind()
                                                 .Arg<ffi::AnyBuffer>()            // factor (read only)
                                                 .Arg<ffi::AnyBuffer>()            // b: local rhs rows
                                                 .Ret<ffi::AnyBuffer>()            // x (aliases b)
                                                 .Ret<ffi::AnyBuffer>()            // local part of log det
                                                 .Ret<ffi::Buffer<ffi::S32>>()));  // status: 0

}  // namespace jaxmg
