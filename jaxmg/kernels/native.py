"""Native per-shard kernels: cuSOLVERMp through the XLA FFI library ``jaxmg._native``.

How one native call runs (each kernel below runs on every device inside ``shard_map``):

1. **Grid bootstrap** (public JAX mechanisms only). A tiny FFI call returns this device's
   identity (``process_index * 1024 + CUDA ordinal``); an ``all_gather`` over the grid's mesh
   axes gives every member the grid's membership in rank order (the cache key). A second tiny
   FFI call returns a fresh ``ncclUniqueId`` on the grid's first member when no communicator
   for these members is cached (zeros elsewhere, and zeros everywhere once cached); a ``psum``
   hands it to every member. The solve handler then creates, once, the NCCL communicator, the
   cuSOLVERMp handle and grid, and caches them with the descriptors and workspaces.

2. **Layout without a second copy** (fused ``potrs``/``potrs_inplace``, when the local extents
   are multiples of ``T_A`` and the grid is square or 1-D). A row-major local block of ``A`` is
   the column-major local block of ``M = A^T = conj(A)`` (Hermitian ``A``) on the transposed
   grid; the lower triangle of ``A`` is the upper triangle of ``M``. A block layout over ``P``
   processes is the block-cyclic layout (tile ``T``) of the symmetrically permuted matrix
   ``S^T M S``, with ``S`` the tile permutation ``sigma(g) = (g % P) * (K / P) + g // P`` (``K``
   tiles). A symmetric permutation moves entries across the diagonal, so the handler first
   fills, in place, the tiles of ``M``'s other triangle that land in the permuted lower
   triangle (about half of them; conjugate-transposed tiles; NCCL point-to-point for tiles held
   by another process, through a bounded scratch; about 1/8 of the matrix crosses NVLink on 2
   GPUs), then, on a 1-D grid, permutes the undistributed dimension's tiles locally, in place
   (rows: one pass along ``sigma``'s cycles; on a square grid rows and columns share ``sigma``
   and nothing moves). cuSOLVERMp then factors ``S^T M S`` (``uplo=LOWER``): Hermitian positive definite
   with the same determinant; ``M y = conj(b)`` is solved as ``(S^T M S)(S^T y) = S^T conj(b)``,
   so only the small right-hand side and solution are permuted, and ``x = conj(y)``.
   With ``donate=True`` the FFI call factors JAX's own buffer in place
   (``input_output_aliases``). XLA honours a donation only when an output of the jitted call
   can take the donated buffer, so ``potrs_inplace`` returns the consumed buffer as a 4th
   (Block) output to be dropped by the caller; without donation XLA copies ``a`` first, which
   doubles the matrix memory: at the largest sizes only the donated call fits.

3. **Natural order** (``cholesky``, the ``cholesky_*`` family, and ``potrs`` when a local extent
   is not a multiple of ``T_A`` or the grid is neither square nor 1-D). The matrix is
   redistributed in JAX into the natural-order block-cyclic layout (one ``all_to_all`` per
   distributed dimension when each process's tile count is a multiple of the process count,
   else a gather; ``diag(A, I)`` padded to a multiple of ``T_A * lcm(nprow, npcol)`` for the
   fused kernels; the family instead uses the largest tile <= ``T_A`` dividing both local
   extents, so its state keeps ``a``'s local shape), factored in place with ``uplo=UPPER``
   (the upper factor ``U`` of ``conj(A)`` is ``L^T``, whose column-major storage is exactly
   ``L``'s row-major storage, so no transpose is needed), and redistributed back for ``L``.

Status: 0, or the order of a leading minor that is not positive definite, counted in the
(permuted, padded) matrix that cuSOLVERMp factors (``N + 1`` where cuSOLVERMp 0.8 reports the
failure without ``info``). Outputs are NaN whenever status != 0; the grid stays usable.

Kernels: ``potrs``/``potrs_inplace`` and ``cholesky`` (fused: factor and solve in one handler
call), and the Cholesky family ``cholesky_factor``/``_solve``/``_logdet``/``_lower``/``_inverse``
(state: the in-place permuted factor of step 2 where the grid is square or 1-D, else, or with
``natural=True``, the natural-order factor of step 3), which ``jaxmg.Cholesky`` and
``jaxmg.potrs`` use.

Batching: a leading unsharded batch axis reaches the FFI call (``vmap_method="expand_dims"``)
and the handler loops over it on one cached grid.
"""

from __future__ import annotations

import glob
import math
import os
import site
import sys

import jax
import jax.numpy as jnp
import numpy as np

NAME = "native"

#: Operations with a native kernel (fused kernels ``potrs`` and ``cholesky``).
SUPPORTED: frozenset = frozenset({"potrs", "cholesky"})

#: Kernel families with native kernels (``cholesky_factor``, ``cholesky_solve``, ...).
FAMILIES: frozenset = frozenset({"cholesky"})

_UPLO_LOWER = 0
_UPLO_UPPER = 1
_MODE_NATURAL = 0
_MODE_INPLACE = 1

_state: dict = {"checked": False, "reason": None, "registered": False}


# --------------------------------------------------------------------------------------------
# Loading the native library and cuSOLVERMp
# --------------------------------------------------------------------------------------------

def _search_dirs() -> list[str]:
    roots = []
    try:
        roots += site.getsitepackages()
    except AttributeError:  # pragma: no cover (virtualenv without getsitepackages)
        pass
    try:
        roots.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    roots += [p for p in sys.path if p and os.path.isdir(p)]
    dirs = []
    for root in dict.fromkeys(roots):
        for sub in ("nvidia/cu13/lib", "nvidia/nccl/lib", "nvidia/cu12/lib", "nvidia/cusolvermp/lib",
                    "nvidia/cublas/lib", "nvidia/cusolver/lib", "nvidia/cusparse/lib", "nvidia/nvjitlink/lib",
                    "nvidia/cuda_runtime/lib"):
            d = os.path.join(root, sub)
            if os.path.isdir(d):
                dirs.append(d)
    return list(dict.fromkeys(dirs))


def _candidates(names, dirs, env=None) -> list[str]:
    out = []
    if env and os.environ.get(env):
        out.append(os.environ[env])
    for d in dirs:
        for name in names:
            out += sorted(glob.glob(os.path.join(d, name)))
    out += list(names)  # the loader's own search (LD_LIBRARY_PATH, ldconfig)
    return list(dict.fromkeys(out))


def library_candidates() -> dict:
    """Candidate paths for cuSOLVERMp, NCCL and their dependencies, in the order tried."""
    dirs = _search_dirs()
    deps = []
    for names in (("libcudart.so.13", "libcudart.so.12"), ("libnvJitLink.so.13", "libnvJitLink.so.12"),
                  ("libcusparse.so.12",), ("libcublasLt.so.13", "libcublasLt.so.12"),
                  ("libcublas.so.13", "libcublas.so.12"), ("libcusolver.so.12", "libcusolver.so.11")):
        found = [c for c in _candidates(names, dirs) if os.path.isabs(c)]
        deps += found[:1]
    return {
        "deps": deps,
        "nccl": _candidates(("libnccl.so.2",), dirs, "JAXMG_NCCL_LIBRARY"),
        "cusolvermp": _candidates(("libcusolverMp.so.0",), dirs, "JAXMG_CUSOLVERMP_LIBRARY"),
    }


def _preload_cuda_runtime() -> None:
    """Load libcudart (the one the nvidia wheels ship) globally before jaxmg._native needs it."""
    import ctypes

    for path in _candidates(("libcudart.so.13", "libcudart.so.12"), _search_dirs()):
        if not os.path.isabs(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def _native_module():
    try:
        from .. import _native  # noqa: PLC0415
    except ImportError:
        _preload_cuda_runtime()
        from .. import _native  # noqa: PLC0415
    return _native


def unavailable_reason() -> str | None:
    """Why the native backend cannot run in this process, or None when it can."""
    if _state["checked"]:
        return _state["reason"]
    try:
        native = _native_module()
    except ImportError as e:
        reason = (
            "the native extension jaxmg._native is not built; reinstall jaxmg on a machine "
            "with the CUDA toolkit and the cuSOLVERMp/NCCL headers (pip install 'jaxmg[cuda13]')"
            f" ({e})"
        )
    else:
        c = library_candidates()
        if native.load(c["deps"], c["nccl"], c["cusolvermp"]):
            reason = None
        else:
            reason = f"cuSOLVERMp could not be loaded: {native.load_error()}"
    _state["checked"] = True
    _state["reason"] = reason
    return reason


def info() -> dict:
    """Versions, library paths and capabilities of the native backend (for bug reports)."""
    reason = unavailable_reason()
    out = {"available": reason is None, "reason": reason}
    if reason is None or "could not be loaded" in (reason or ""):
        native = _native_module()
        out.update(
            header_versions=native.header_versions(),
            cuda_runtime=native.cuda_runtime_version(),
            nccl_version=native.nccl_version(),
            cusolvermp_version=native.cusolvermp_version(),
            libraries=native.library_paths(),
            capabilities=native.capabilities(),
            cache=native.cache_info(),
        )
    try:
        from importlib.metadata import version

        out["cusolvermp_wheel"] = version("nvidia-cusolvermp-cu13")
    except Exception:  # noqa: BLE001
        out["cusolvermp_wheel"] = None
    return out


def last_timings() -> list:
    """GPU time (ms) of the last native call on each local device: layout reorder and cuSOLVERMp."""
    return _native_module().last_timings()


def _register() -> None:
    if _state["registered"]:
        return
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the native backend cannot run here: {reason}")
    native = _native_module()
    for name, capsule in native.handlers().items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
    native.set_process_index(jax.process_index())
    _state["registered"] = True


def _check_one_gpu_per_process() -> None:
    if jax.local_device_count() > 1:
        raise RuntimeError(
            f"the native backend needs one process per GPU, but this process drives "
            f"{jax.local_device_count()} GPUs. Launch with `python -m jaxmg.launch -n NGPUS "
            f"script.py` (one process per GPU), or use backend='portable'."
        )


# --------------------------------------------------------------------------------------------
# Grid geometry and bootstrap (inside shard_map)
# --------------------------------------------------------------------------------------------

def _name(axes):
    return axes if len(axes) > 1 else axes[0]


def _index(axes):
    return jax.lax.axis_index(_name(axes)) if axes else jnp.int32(0)


def _grid_axes(grid):
    return tuple(grid.row_axes) + tuple(grid.col_axes)


def _bootstrap(grid):
    """(members, nccl_id, rank) of this device's grid, as int32 device arrays."""
    # Neither call is marked as having side effects: each is a function of the device (and of
    # the communicator cache, which only its consumers change), so XLA may merge or drop them
    # with the kernels that use them. Marked effectful, they survived the removal of an unused
    # kernel (e.g. the log det value in a JVP that needs only its tangent) as a manual
    # computation without outputs, which XLA's SPMD partitioner rejects.
    ident = jax.ffi.ffi_call("jaxmg_identity", jax.ShapeDtypeStruct((1,), jnp.int32))()
    members = ident
    if grid.col_axes:
        members = jax.lax.all_gather(members, _name(grid.col_axes), axis=0, tiled=True)
    if grid.row_axes:
        members = jax.lax.all_gather(members, _name(grid.row_axes), axis=0, tiled=True)
    i, j = _index(grid.row_axes), _index(grid.col_axes)
    rank = jnp.reshape(j + i * grid.npcol, (1,)).astype(jnp.int32)
    nid = jax.ffi.ffi_call("jaxmg_nccl_id", jax.ShapeDtypeStruct((32,), jnp.int32))(members, rank)
    axes = _grid_axes(grid)
    if axes:
        nid = jax.lax.psum(nid, _name(axes))
    return members, nid, rank


def _solve_call(f_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
    """The FFI call with a factor made by _factor_call (read only): potrs and the local log det."""
    nloc, mloc = f_m.shape[-2], f_m.shape[-1]
    real = jnp.finfo(f_m.dtype).dtype
    nrhs = b_m.shape[-2] if solve else 1
    return jax.ffi.ffi_call(
        "jaxmg_potrs",
        (
            jax.ShapeDtypeStruct(b_m.shape, b_m.dtype),
            jax.ShapeDtypeStruct((), real),
            jax.ShapeDtypeStruct((), jnp.int32),
        ),
        input_output_aliases={1: 0},
        vmap_method="expand_dims",
    )(f_m, b_m, members, nid, rank,
      n=np.int64(n), tile=np.int64(tile), pr=np.int64(pr), pc=np.int64(pc), mloc=np.int64(mloc),
      nloc=np.int64(nloc), nrhs=np.int64(nrhs), mode=np.int64(mode), solve=np.int64(solve),
      uplo=np.int64(_UPLO_LOWER if mode == _MODE_INPLACE else _UPLO_UPPER))


def _factor_call(a_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
    """The FFI call: factor (and solve) in place. a_m is (nloc, mloc) row-major = M's local block."""
    nloc, mloc = a_m.shape[-2], a_m.shape[-1]
    real = jnp.finfo(a_m.dtype).dtype
    nrhs = b_m.shape[-2] if solve else 1
    outs = jax.ffi.ffi_call(
        "jaxmg_potrf",
        (
            jax.ShapeDtypeStruct(a_m.shape, a_m.dtype),
            jax.ShapeDtypeStruct(b_m.shape, b_m.dtype),
            jax.ShapeDtypeStruct((), real),
            jax.ShapeDtypeStruct((), jnp.int32),
        ),
        input_output_aliases={0: 0, 1: 1},
        vmap_method="expand_dims",
    )(a_m, b_m, members, nid, rank,
      n=np.int64(n), tile=np.int64(tile), pr=np.int64(pr), pc=np.int64(pc), mloc=np.int64(mloc),
      nloc=np.int64(nloc), nrhs=np.int64(nrhs), mode=np.int64(mode), solve=np.int64(solve),
      uplo=np.int64(_UPLO_LOWER if mode == _MODE_INPLACE else _UPLO_UPPER))
    return outs


# --------------------------------------------------------------------------------------------
# Redistribution helpers for the natural-order path (inside shard_map)
# --------------------------------------------------------------------------------------------

def _padded_size(n: int, tile: int, grid) -> int:
    step = tile * math.lcm(grid.nprow, grid.npcol)
    return -(-n // step) * step


def _to_cyclic(x, axis: int, axes, nproc: int, n: int, npad: int, tile: int):
    """Local block (block layout over `axes` along `axis`) -> local block-cyclic tiles of padded extent.

    Without padding, and with each process's tile count a multiple of ``nproc``, one all_to_all
    moves exactly the tiles that change owner (one extra local block in flight); otherwise the
    extent is gathered whole along `axis` first (``nproc`` local blocks).
    """
    axis = axis % x.ndim
    local = n // nproc
    if nproc > 1 and npad == n and (local // tile) % nproc == 0 and local % tile == 0:
        kr = local // tile
        # local tile l goes to process l % nproc (its global index is a multiple of nproc apart)
        y = x.reshape(x.shape[:axis] + (kr // nproc, nproc, tile) + x.shape[axis + 1:])
        y = jnp.swapaxes(y, axis, axis + 1)  # (nproc, kr/nproc, tile) at axis
        y = jax.lax.all_to_all(y, _name(axes), axis, axis, tiled=False)  # chunk s: from process s
        return y.reshape(x.shape)
    if nproc > 1:
        x = jax.lax.all_gather(x, _name(axes), axis=axis, tiled=True)
    if npad > n:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, npad - n)
        x = jnp.pad(x, pad)
    if nproc > 1:
        k = npad // tile
        shape = x.shape[:axis] + (k // nproc, nproc, tile) + x.shape[axis + 1:]
        x = x.reshape(shape)
        x = jax.lax.dynamic_index_in_dim(x, _index(axes), axis=axis + 1, keepdims=False)
        x = x.reshape(x.shape[:axis] + (npad // nproc,) + x.shape[axis + 2:])
    return x


def _from_cyclic(y, axis: int, axes, nproc: int, n: int, npad: int, tile: int):
    """Inverse of _to_cyclic: local block-cyclic tiles -> local block of the unpadded extent."""
    axis = axis % y.ndim
    local = n // nproc
    if nproc > 1 and npad == n and (local // tile) % nproc == 0 and local % tile == 0:
        kr = local // tile
        # local cyclic tile l (global me + l*nproc) belongs to block owner l // (kr/nproc)
        z = y.reshape(y.shape[:axis] + (nproc, kr // nproc, tile) + y.shape[axis + 1:])
        z = jax.lax.all_to_all(z, _name(axes), axis, axis, tiled=False)  # chunk s: tiles s + l'*nproc
        z = jnp.swapaxes(z, axis, axis + 1)  # (kr/nproc, nproc, tile): block order
        return z.reshape(y.shape)
    if nproc > 1:
        y = jax.lax.all_gather(y, _name(axes), axis=axis, tiled=False)  # (nproc, npad/nproc) at axis
        k = npad // tile
        y = y.reshape(y.shape[:axis] + (nproc, k // nproc, tile) + y.shape[axis + 2:])
        y = jnp.swapaxes(y, axis, axis + 1)
        y = y.reshape(y.shape[:axis] + (npad,) + y.shape[axis + 3:])
    y = jax.lax.slice_in_dim(y, 0, n, axis=axis)
    if nproc > 1:
        size = n // nproc
        y = jax.lax.dynamic_slice_in_dim(y, _index(axes) * size, size, axis=axis)
    return y


def _cyclic_matrix(a, grid, n: int, npad: int, tile: int):
    """The local natural-order block-cyclic block of diag(A, I) (padded), row-major like `a`."""
    x = _to_cyclic(a, -2, grid.row_axes, grid.nprow, n, npad, tile)
    x = _to_cyclic(x, -1, grid.col_axes, grid.npcol, n, npad, tile)
    if npad > n:
        i, j = _index(grid.row_axes), _index(grid.col_axes)
        r = jnp.arange(x.shape[-2])
        c = jnp.arange(x.shape[-1])
        gr = ((r // tile) * grid.nprow + i) * tile + r % tile
        gc = ((c // tile) * grid.npcol + j) * tile + c % tile
        pad_diag = (gr[:, None] == gc[None, :]) & (gr[:, None] >= n)
        x = jnp.where(pad_diag, jnp.ones((), x.dtype), x)
    return x


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------

def _no_rhs(x):
    """A 1 x 1 right-hand side for handler calls that solve nothing, batched like x under vmap."""
    return jnp.zeros((1, 1), x.dtype) * x[..., :1, :1]


def _inplace_ok(n: int, tile: int, grid) -> bool:
    pr, pc = grid.npcol, grid.nprow
    if (n // pr) % tile or (n // pc) % tile:
        return False
    return pr == pc or pr == 1 or pc == 1


def _finish(x, logdet, status, grid):
    axes = _grid_axes(grid)
    if axes:
        logdet = jax.lax.psum(logdet, _name(axes))
        status = jax.lax.pmax(status, _name(axes))
    bad = status != 0
    x = jnp.where(bad, jnp.full((), jnp.nan, x.dtype), x)
    logdet = jnp.where(bad, jnp.full((), jnp.nan, logdet.dtype), 2 * logdet)
    return x, logdet, status


def _solution_rows(xl, grid):
    """The solution's local rows are valid on process column 0 (JAX row index 0): share them."""
    if grid.row_axes:
        i = _index(grid.row_axes)
        xl = jnp.where(i == 0, xl, jnp.zeros((), xl.dtype))
        xl = jax.lax.psum(xl, _name(grid.row_axes))
    return xl


def _permuted_rows(bc, grid, n: int, tile: int):
    """This member's right-hand-side rows for the in-place (permuted) layout, from a whole
    (n, nrhs) ``bc``: the rows of its block (a row-distributed grid), or all rows in the
    permuted order ``sigma`` (a column-distributed 1-D grid)."""
    pr, pc = grid.npcol, grid.nprow
    if pr > 1:
        return jax.lax.dynamic_slice_in_dim(bc, _index(grid.col_axes) * (n // pr), n // pr, axis=0)
    if pc > 1:
        k, nrhs = n // tile, bc.shape[-1]
        return bc.reshape(pc, k // pc, tile, nrhs).transpose(1, 0, 2, 3).reshape(n, nrhs)
    return bc


def _permuted_whole(xl, grid, n: int, tile: int):
    """Inverse of _permuted_rows: the whole solution from the local rows valid on process column 0."""
    pr, pc = grid.npcol, grid.nprow
    xl = _solution_rows(xl, grid)
    if pr > 1:
        return jax.lax.all_gather(xl, _name(grid.col_axes), axis=0, tiled=True)
    if pc > 1:
        k, nrhs = n // tile, xl.shape[-1]
        return xl.reshape(k // pc, pc, tile, nrhs).transpose(1, 0, 2, 3).reshape(n, nrhs)
    return xl


def potrs(a, b, *, grid, tile):
    """Solve A x = b (A Hermitian positive definite, lower triangle read); (x, logdet, status)."""
    return potrs_inplace(a, b, grid=grid, tile=tile)[:3]


def potrs_inplace(a, b, *, grid, tile):
    """potrs, also returning the consumed matrix buffer (a's local block shape) as a 4th output.

    Returning it (as a Block output, then dropping it) lets XLA alias a donated ``a`` to the
    FFI call's in-place factor: a donated input that no output aliases is copied instead,
    which doubles the memory. The 4th output's contents are unspecified (the permuted factor).
    """
    _check_one_gpu_per_process()
    _register()
    tile = int(tile)
    n = a.shape[-2] * grid.nprow
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    bc = jnp.conj(b2)
    pr, pc = grid.npcol, grid.nprow
    members, nid, rank = _bootstrap(grid)

    if _inplace_ok(n, tile, grid):
        bl = _permuted_rows(bc, grid, n, tile)
        consumed, xt, logdet, status = _factor_call(a, bl.T, members, nid, rank, n=n, tile=tile, pr=pr, pc=pc,
                                                    mode=_MODE_INPLACE, solve=1)
        x = _permuted_whole(xt.T, grid, n, tile)
    else:
        consumed = a
        npad = _padded_size(n, tile, grid)
        am = _cyclic_matrix(a, grid, n, npad, tile)
        bl = _rows_of(jnp.pad(bc, ((0, npad - n), (0, 0))), _index(grid.col_axes), npad, tile, pr)
        _, xt, logdet, status = _factor_call(am, bl.T, members, nid, rank, n=npad, tile=tile, pr=pr, pc=pc,
                                             mode=_MODE_NATURAL, solve=1)
        x = _whole_rows(xt.T, grid, npad, tile, pr)[:n]
    x = jnp.conj(x)
    x = x[:, 0] if vector else x
    return _finish(x, logdet, status, grid) + (consumed,)


def cholesky(a, *, grid, tile):
    """Lower factor L (this device's block, natural order) with A = L L^H, and status."""
    _check_one_gpu_per_process()
    _register()
    tile = int(tile)
    n = a.shape[-2] * grid.nprow
    pr, pc = grid.npcol, grid.nprow
    members, nid, rank = _bootstrap(grid)
    npad = _padded_size(n, tile, grid)
    am = _cyclic_matrix(a, grid, n, npad, tile)
    dummy = _no_rhs(a)
    f, _, _, status = _factor_call(am, dummy, members, nid, rank, n=npad, tile=tile, pr=pr, pc=pc,
                                   mode=_MODE_NATURAL, solve=0)
    f = _from_cyclic(f, -2, grid.row_axes, grid.nprow, n, npad, tile)
    f = _from_cyclic(f, -1, grid.col_axes, grid.npcol, n, npad, tile)
    i, j = _index(grid.row_axes), _index(grid.col_axes)
    rows = i * f.shape[-2] + jnp.arange(f.shape[-2])
    cols = j * f.shape[-1] + jnp.arange(f.shape[-1])
    f = jnp.where(rows[:, None] >= cols[None, :], f, jnp.zeros((), f.dtype))
    axes = _grid_axes(grid)
    if axes:
        status = jax.lax.pmax(status, _name(axes))
    f = jnp.where(status != 0, jnp.full((), jnp.nan, f.dtype), f)
    return f, status


# --------------------------------------------------------------------------------------------
# The Cholesky family (factor once; then solve, log det, L, inverse from the saved factor)
# --------------------------------------------------------------------------------------------
# The state is cuSOLVERMp's factor in a's local block shape (tile ``family_tile``), in one of
# two layouts, chosen by ``_permuted(n, t, grid, natural)`` from static values alone:
# * permuted (the default where the grid is square or 1-D): ``a``'s own buffer factored in
#   place, exactly as the fused ``potrs`` does (layout step 2 above): the lower factor of
#   S^T M S. Nothing is redistributed, and with donation the matrix is never copied. Solves
#   permute only the right-hand side; log det reads the factor's diagonal; L itself cannot be
#   read from it (the module refactors in natural order for that).
# * natural (``natural=True``, or other grids): the natural-order block-cyclic layout
#   (redistributed in JAX), factored with ``uplo=UPPER``: the upper factor U of conj(A) = A^T,
#   whose column-major storage is L's row-major storage, so L can be read back.
# A failed factorisation leaves the state NaN (the handler fills it), so every consumer's
# outputs are NaN too.

def family_tile(n: int, tile: int, grid) -> int:
    """The largest divisor of both local extents that is at most ``tile`` (no padding needed)."""
    g = math.gcd(n // grid.nprow, n // grid.npcol)
    best = 1
    for d in range(1, int(math.isqrt(g)) + 1):
        if g % d == 0:
            for c in (d, g // d):
                if c <= tile:
                    best = max(best, c)
    return best


def _rows_of(bc, j, n, tile, pr):
    """This process row's rows of a whole (n, nrhs) right-hand side, natural block-cyclic order."""
    k = n // tile
    bl = bc.reshape(k // pr, pr, tile, bc.shape[-1])
    return jax.lax.dynamic_index_in_dim(bl, j, axis=1, keepdims=False).reshape(n // pr, bc.shape[-1])


def _whole_rows(xl, grid, n, tile, pr):
    """Inverse of _rows_of, from the local rows valid on process column 0."""
    xl = _solution_rows(xl, grid)
    if pr == 1:
        return xl
    k = n // tile
    xg = jax.lax.all_gather(xl, _name(grid.col_axes), axis=0, tiled=False)
    return xg.reshape(pr, k // pr, tile, xl.shape[-1]).transpose(1, 0, 2, 3).reshape(n, xl.shape[-1])


def _permuted(n: int, tile: int, grid, natural: bool) -> bool:
    """Whether the family state is in the permuted (in-place) layout."""
    return not natural and _inplace_ok(n, tile, grid)


def cholesky_state_is_lower(n: int, tile: int, grid, natural: bool = False) -> bool:
    """Whether the factor state of an n x n matrix holds L (natural order), so that
    ``cholesky_lower`` can read it; False for the permuted in-place state."""
    return not _permuted(n, family_tile(n, int(tile), grid), grid, natural)


def _family_call(local, grid, tile, natural):
    """What each family kernel that calls the handlers starts with: the one-GPU-per-process
    check, the FFI registration, the global size n, the family tile, the grid bootstrap and
    the handler attributes of the state's layout (grid and mode)."""
    _check_one_gpu_per_process()
    _register()
    n = local.shape[-2] * grid.nprow
    t = family_tile(n, int(tile), grid)
    mode = _MODE_INPLACE if _permuted(n, t, grid, natural) else _MODE_NATURAL
    return n, t, _bootstrap(grid), dict(n=n, tile=t, pr=grid.npcol, pc=grid.nprow, mode=mode)


def cholesky_factor(a, *, grid, tile, natural=False):
    """Factor A = L L^H (lower triangle read); returns (the backend's factor state, status)."""
    n, t, boot, attrs = _family_call(a, grid, tile, natural)
    dummy = _no_rhs(a)
    if attrs["mode"] == _MODE_NATURAL:
        a = _cyclic_matrix(a, grid, n, n, t)
    f, _, _, status = _factor_call(a, dummy, *boot, solve=0, **attrs)
    axes = _grid_axes(grid)
    if axes:
        status = jax.lax.pmax(status, _name(axes))
    return f, status


def cholesky_solve(state, b, *, grid, tile, natural=False):
    """x = A^-1 b from the factor state; b and x whole."""
    n, t, boot, attrs = _family_call(state, grid, tile, natural)
    vector = b.ndim == 1
    bc = jnp.conj(b[:, None] if vector else b)
    if attrs["mode"] == _MODE_INPLACE:
        bl = _permuted_rows(bc, grid, n, t)
    else:
        bl = _rows_of(bc, _index(grid.col_axes), n, t, grid.npcol)
    xt, _, _ = _solve_call(state, bl.T, *boot, solve=1, **attrs)
    if attrs["mode"] == _MODE_INPLACE:
        x = _permuted_whole(xt.T, grid, n, t)
    else:
        x = _whole_rows(xt.T, grid, n, t, grid.npcol)
    x = jnp.conj(x)
    return (x[:, 0] if vector else x,)


def cholesky_logdet(state, *, grid, tile, natural=False):
    """log det A (real), from the factor's diagonal."""
    _, _, boot, attrs = _family_call(state, grid, tile, natural)
    dummy = _no_rhs(state)
    _, logdet, _ = _solve_call(state, dummy, *boot, solve=0, **attrs)
    axes = _grid_axes(grid)
    if axes:
        logdet = jax.lax.psum(logdet, _name(axes))
    return (2 * logdet,)


def cholesky_lower(state, *, grid, tile, natural=False):
    """The natural-order lower factor L (this device's block), zero above the diagonal."""
    n = state.shape[-2] * grid.nprow
    t = family_tile(n, int(tile), grid)
    if _permuted(n, t, grid, natural):
        raise ValueError("this Cholesky state is in cuSOLVERMp's permuted in-place layout, from which L cannot "
                         "be read; factor with natural=True (jaxmg.Cholesky(a, natural=True)) to read L.")
    f = _from_cyclic(state, -2, grid.row_axes, grid.nprow, n, n, t)
    f = _from_cyclic(f, -1, grid.col_axes, grid.npcol, n, n, t)
    i, j = _index(grid.row_axes), _index(grid.col_axes)
    rows = i * f.shape[-2] + jnp.arange(f.shape[-2])
    cols = j * f.shape[-1] + jnp.arange(f.shape[-1])
    # a failed factorisation's state is all NaN (the handler fills it): keep it NaN everywhere
    upper = jnp.where(jnp.isnan(f), f, jnp.zeros((), f.dtype))
    return (jnp.where(rows[:, None] >= cols[None, :], f, upper),)


def cholesky_inverse(state, *, grid, tile, natural=False):
    """A^-1 (this device's block), one block of the identity's columns at a time.

    Step k solves for the columns of A^-1 in block k of the grid's rows (or, on a one-row
    grid, of its columns): n/P right-hand sides, whole on every device for that step only, so
    memory stays a few local blocks, never n x n. With blocks of rows, A^-1 being Hermitian,
    row block k of A^-1 is the conjugate transpose of column block k.
    """
    n = state.shape[-2] * grid.nprow
    i, j = _index(grid.row_axes), _index(grid.col_axes)
    mr, mc = n // grid.nprow, n // grid.npcol
    by_rows = grid.nprow > 1
    parts = grid.nprow if by_rows else grid.npcol
    size = n // parts
    rows = jax.lax.broadcasted_iota(jnp.int32, (n, size), 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, (n, size), 1)

    def step(k, out):
        eye_k = (rows == cols + k * size).astype(state.dtype)  # columns of block k of the identity
        (x,) = cholesky_solve(state, eye_k, grid=grid, tile=tile, natural=natural)  # A^-1[:, block k]
        if by_rows:
            block = jax.lax.dynamic_slice_in_dim(jnp.conj(x).T, j * mc, mc, axis=1)  # A^-1[block k, cols j]
            return jnp.where(i == k, block, out)
        block = jax.lax.dynamic_slice_in_dim(x, i * mr, mr, axis=0)  # A^-1[rows i, block k]
        return jnp.where(j == k, block, out)

    return (jax.lax.fori_loop(0, parts, step, jnp.zeros((mr, mc), state.dtype)),)
