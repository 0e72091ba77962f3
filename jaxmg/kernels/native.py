"""Native per-shard kernels: cuSOLVERMp through the XLA FFI library ``jaxmg._native``.

How one native call runs (each kernel below runs on every device inside ``shard_map``):

1. **Grid bootstrap** (public JAX mechanisms only). A tiny FFI call returns this device's
   identity (``process_index * 1024 + CUDA ordinal``); an ``all_gather`` over the grid's mesh
   axes gives every member the grid's membership in rank order (the cache key). A second tiny
   FFI call returns a fresh ``ncclUniqueId`` on the grid's first member when no communicator
   for these members is cached (zeros elsewhere, and zeros everywhere once cached); a ``psum``
   hands it to every member. The solve handler then creates, once, the NCCL communicator, the
   cuSOLVERMp handle and grid, and caches them with the descriptors and workspaces.

2. **Layout without a second copy** (``potrs``, when the local extents are multiples of
   ``T_A``). A row-major local block of ``A`` is the column-major local block of
   ``A^T = conj(A)`` (Hermitian ``A``) on the transposed grid, and the lower triangle of ``A`` is
   the upper triangle of ``conj(A)``; so cuSOLVERMp factors ``M = conj(A)`` with
   ``uplo=UPPER`` straight from JAX's buffers. A block layout over ``P`` processes is the
   block-cyclic layout (tile ``T``) of the symmetrically permuted matrix ``S^T M S``, with
   ``S`` the tile permutation ``sigma(g) = (g % P) * (K / P) + g // P`` (``K`` tiles). On a
   square grid the rows and columns use the same ``sigma`` and nothing moves; on a 1-D grid the
   undistributed dimension is reordered locally, in place, through a bounded scratch
   (csrc/layout.cu). ``S^T M S`` is Hermitian positive definite with the same determinant, and
   ``M y = conj(b)`` is solved as ``(S^T M S)(S^T y) = S^T conj(b)``: only the small right-hand
   side and solution are permuted. ``x = conj(y)``.
   With ``donate=True`` the FFI call factors JAX's own buffer in place
   (``input_output_aliases``); without it XLA copies ``a`` first (it must keep the caller's
   array), which doubles the matrix memory: at the largest sizes only the donated call fits.

3. **Padding / natural order** (``cholesky``; ``potrs`` when a local extent is not a multiple of
   ``T_A`` or the grid is neither square nor 1-D). The matrix is redistributed in JAX into the
   natural-order block-cyclic layout of ``diag(A, I)`` padded to a multiple of
   ``T_A * lcm(nprow, npcol)`` (this costs extra copies of the local block), factored in place,
   and for ``cholesky`` redistributed back: the upper factor ``U`` of ``conj(A)`` is ``L^T``,
   whose column-major storage is exactly ``L``'s row-major storage, so no transpose is needed.

Status: 0, or cuSOLVERMp's ``info`` (> 0: a leading minor of the (permuted, padded) matrix is not
positive definite; its order refers to that matrix). Outputs are NaN whenever status != 0.

Batching: a leading unsharded batch axis reaches the FFI call (``vmap_method="expand_dims"``)
and the handler loops over it on one cached grid.
"""

from __future__ import annotations

import functools
import glob
import math
import os
import site
import sys

import jax
import jax.numpy as jnp
import numpy as np

NAME = "native"

#: Operations with a native kernel.
SUPPORTED: frozenset = frozenset({"potrs", "cholesky"})

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


def _native_module():
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
    ident = jax.ffi.ffi_call("jaxmg_identity", jax.ShapeDtypeStruct((1,), jnp.int32), has_side_effect=True)()
    members = ident
    if grid.col_axes:
        members = jax.lax.all_gather(members, _name(grid.col_axes), axis=0, tiled=True)
    if grid.row_axes:
        members = jax.lax.all_gather(members, _name(grid.row_axes), axis=0, tiled=True)
    i, j = _index(grid.row_axes), _index(grid.col_axes)
    rank = jnp.reshape(j + i * grid.npcol, (1,)).astype(jnp.int32)
    nid = jax.ffi.ffi_call("jaxmg_nccl_id", jax.ShapeDtypeStruct((32,), jnp.int32), has_side_effect=True)(members, rank)
    axes = _grid_axes(grid)
    if axes:
        nid = jax.lax.psum(nid, _name(axes))
    return members, nid, rank


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
      uplo=np.int64(_UPLO_UPPER))
    return outs


# --------------------------------------------------------------------------------------------
# Redistribution helpers for the natural-order path (inside shard_map)
# --------------------------------------------------------------------------------------------

def _padded_size(n: int, tile: int, grid) -> int:
    step = tile * math.lcm(grid.nprow, grid.npcol)
    return -(-n // step) * step


def _to_cyclic(x, axis: int, axes, nproc: int, n: int, npad: int, tile: int):
    """Local block (block layout over `axes` along `axis`) -> local block-cyclic tiles of padded extent."""
    axis = axis % x.ndim
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


def potrs(a, b, *, grid, tile):
    """Solve A x = b (A Hermitian positive definite, lower triangle read); (x, logdet, status)."""
    _check_one_gpu_per_process()
    _register()
    tile = int(tile)
    n = a.shape[-2] * grid.nprow
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    nrhs = b2.shape[-1]
    bc = jnp.conj(b2)
    pr, pc = grid.npcol, grid.nprow
    members, nid, rank = _bootstrap(grid)
    j = _index(grid.col_axes)

    if _inplace_ok(n, tile, grid):
        if pr > 1:
            bl = jax.lax.dynamic_slice_in_dim(bc, j * (n // pr), n // pr, axis=0)
        elif pc > 1:
            k = n // tile
            bl = bc.reshape(pc, k // pc, tile, nrhs).transpose(1, 0, 2, 3).reshape(n, nrhs)
        else:
            bl = bc
        _, xt, logdet, status = _factor_call(a, bl.T, members, nid, rank, n=n, tile=tile, pr=pr, pc=pc,
                                             mode=_MODE_INPLACE, solve=1)
        xl = _solution_rows(xt.T, grid)
        if pr > 1:
            x = jax.lax.all_gather(xl, _name(grid.col_axes), axis=0, tiled=True)
        elif pc > 1:
            k = n // tile
            x = xl.reshape(k // pc, pc, tile, nrhs).transpose(1, 0, 2, 3).reshape(n, nrhs)
        else:
            x = xl
    else:
        npad = _padded_size(n, tile, grid)
        am = _cyclic_matrix(a, grid, n, npad, tile)
        bp = jnp.pad(bc, ((0, npad - n), (0, 0)))
        kp = npad // tile
        bl = bp.reshape(kp // pr, pr, tile, nrhs)
        bl = jax.lax.dynamic_index_in_dim(bl, j, axis=1, keepdims=False).reshape(npad // pr, nrhs)
        _, xt, logdet, status = _factor_call(am, bl.T, members, nid, rank, n=npad, tile=tile, pr=pr, pc=pc,
                                             mode=_MODE_NATURAL, solve=1)
        xl = _solution_rows(xt.T, grid)
        if pr > 1:
            xg = jax.lax.all_gather(xl, _name(grid.col_axes), axis=0, tiled=False)  # (pr, npad/pr, nrhs)
            x = xg.reshape(pr, kp // pr, tile, nrhs).transpose(1, 0, 2, 3).reshape(npad, nrhs)
        else:
            x = xl
        x = x[:n]
    x = jnp.conj(x)
    x = x[:, 0] if vector else x
    return _finish(x, logdet, status, grid)


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
    dummy = jnp.zeros((1, 1), a.dtype)
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
