"""What every native kernel shares, inside ``shard_map``: the grid's geometry and bootstrap, the one
function that builds an FFI call of any handler, redistribution between a's block layout and the
natural-order block-cyclic layout, the right-hand-side permutations, and the status helper.

Geometry. The local block of ``a`` (rows split over the mesh axes ``grid.row_axes``, columns over
``grid.col_axes``) is row-major; read column-major it is the local block of ``a^T`` on the
transposed grid. So cuSOLVERMp's grid is ``pr x pc = grid.npcol x grid.nprow`` (``mp_grid``),
and this device's rank is ``p + q * pr`` with ``p`` its mesh column index and ``q`` its mesh row
index (column-major rank mapping).

Bootstrap (public JAX mechanisms only). A tiny FFI call returns this device's identity
(``process_index * CODES['process_stride'] + CUDA ordinal``, csrc/codes.h); an ``all_gather`` over the grid's mesh axes
gives every member the grid's membership in rank order (the cache key). A second tiny FFI call returns
a fresh ``ncclUniqueId`` on the grid's first member when no communicator for these members is
cached (zeros elsewhere, and zeros everywhere once cached); a ``psum`` hands it to every member.
The family handler then creates, once, the NCCL communicator, the cuSOLVERMp handle and grid, and
caches them with the descriptors and workspaces (csrc/grid.cc).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ... import _sharded
from ..._sharded import axis_index as index, axis_name as name  # noqa: F401 (the kernels' names)
from ..families import KernelPlan
from ..ffi import _library

# --- Grid geometry and bootstrap ---


def grid_axes(grid):
    """Every mesh axis of the grid: rows first."""
    return tuple(grid.row_axes) + tuple(grid.col_axes)


def mp_grid(grid) -> tuple[int, int]:
    """cuSOLVERMp's grid ``(pr, pc)``: the mesh grid transposed (module docstring)."""
    return grid.npcol, grid.nprow


def ffi_call(target: str, results, operands, boot=(), aliases=None, **attrs):
    """One call of native handler ``target``, for any family.

    The handler takes the grid arguments ``boot`` (members, NCCL id, rank, from
    :func:`bootstrap`; none for the core's own handlers) and then ``operands``; ``results`` are
    ``jax.ShapeDtypeStruct``s; ``aliases`` maps an operand's position in ``operands`` to the
    result that reuses its buffer (in place); integer attributes go as int64. Under ``vmap`` a
    leading batch axis reaches the handler, which loops over it on one cached grid.
    """
    shift = len(boot)
    aliases = {i + shift: o for i, o in (aliases or {}).items()}
    return jax.ffi.ffi_call(target, results, input_output_aliases=aliases or None, vmap_method="expand_dims")(
        *boot, *operands, **{k: np.int64(v) for k, v in attrs.items()}
    )


def bootstrap(grid):
    """(members, nccl_id, rank) of this device's grid, as int32 device arrays."""
    # Neither call is marked as having side effects (each is a function of the device and of the
    # communicator cache), so XLA may drop them with an unused kernel; effectful, they would
    # survive it as a manual computation without outputs, which XLA's SPMD partitioner rejects.
    members = ffi_call("jaxmg_identity", jax.ShapeDtypeStruct((1,), jnp.int32), ())
    if grid.col_axes:
        members = jax.lax.all_gather(members, name(grid.col_axes), axis=0, tiled=True)
    if grid.row_axes:
        members = jax.lax.all_gather(members, name(grid.row_axes), axis=0, tiled=True)
    i, j = index(grid.row_axes), index(grid.col_axes)
    rank = jnp.reshape(j + i * grid.npcol, (1,)).astype(jnp.int32)
    nid = ffi_call("jaxmg_nccl_id", jax.ShapeDtypeStruct((32,), jnp.int32), (members, rank))
    axes = grid_axes(grid)
    if axes:
        nid = jax.lax.psum(nid, name(axes))
    return members, nid, rank


def start(grid):
    """What every kernel that calls a family handler starts with: the one-GPU-per-process check,
    the handlers' registration and the grid bootstrap; returns the grid arguments."""
    _library.check_one_gpu_per_process()
    _library.register()
    return bootstrap(grid)


def family_tile(n: int, tile: int, grid, powers_of_two: bool = False) -> int:
    """The largest divisor of both local extents that is at most ``tile`` (no padding needed),
    among powers of two only where ``powers_of_two``."""
    g = math.gcd(n // grid.nprow, n // grid.npcol)
    return max(d for d in range(1, min(g, tile) + 1) if g % d == 0 and (not powers_of_two or d & (d - 1) == 0))


def no_rhs(x):
    """A 1 x 1 right-hand side for handler calls that solve nothing, batched like x under vmap."""
    return jnp.zeros((1, 1), x.dtype) * x[..., :1, :1]


# --- Status: agreed over the grid, NaN outputs on failure ---


def agreed(status, grid, *outputs):
    """``(status, *outputs)`` with status agreed over the grid (the maximum: 0, or LAPACK's
    ``info``) and every output NaN wherever it is not 0."""
    axes = grid_axes(grid)
    if axes:
        status = jax.lax.pmax(status, name(axes))
    bad = status != 0
    return (status,) + tuple(jnp.where(bad, jnp.full((), jnp.nan, x.dtype), x) for x in outputs)


# --- Redistribution between the block layout and the natural-order block-cyclic layout ---


def padded_size(n: int, tile: int, grid) -> int:
    """n rounded up to a multiple of ``tile * lcm(nprow, npcol)``."""
    step = tile * math.lcm(grid.nprow, grid.npcol)
    return -(-n // step) * step


def to_cyclic(x, axis: int, axes, nproc: int, n: int, npad: int, tile: int):
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
        y = x.reshape(x.shape[:axis] + (kr // nproc, nproc, tile) + x.shape[axis + 1 :])
        y = jnp.swapaxes(y, axis, axis + 1)  # (nproc, kr/nproc, tile) at axis
        y = jax.lax.all_to_all(y, name(axes), axis, axis, tiled=False)  # chunk s: from process s
        return y.reshape(x.shape)
    if nproc > 1:
        x = jax.lax.all_gather(x, name(axes), axis=axis, tiled=True)
    if npad > n:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, npad - n)
        x = jnp.pad(x, pad)
    if nproc > 1:
        k = npad // tile
        shape = x.shape[:axis] + (k // nproc, nproc, tile) + x.shape[axis + 1 :]
        x = x.reshape(shape)
        x = jax.lax.dynamic_index_in_dim(x, index(axes), axis=axis + 1, keepdims=False)
        x = x.reshape(x.shape[:axis] + (npad // nproc,) + x.shape[axis + 2 :])
    return x


def from_cyclic(y, axis: int, axes, nproc: int, n: int, npad: int, tile: int):
    """Inverse of to_cyclic: local block-cyclic tiles -> local block of the unpadded extent."""
    axis = axis % y.ndim
    local = n // nproc
    if nproc > 1 and npad == n and (local // tile) % nproc == 0 and local % tile == 0:
        kr = local // tile
        # local cyclic tile l (global me + l*nproc) belongs to block owner l // (kr/nproc)
        z = y.reshape(y.shape[:axis] + (nproc, kr // nproc, tile) + y.shape[axis + 1 :])
        z = jax.lax.all_to_all(z, name(axes), axis, axis, tiled=False)  # chunk s: tiles s + l'*nproc
        z = jnp.swapaxes(z, axis, axis + 1)  # (kr/nproc, nproc, tile): block order
        return z.reshape(y.shape)
    if nproc > 1:
        y = jax.lax.all_gather(y, name(axes), axis=axis, tiled=False)  # (nproc, npad/nproc) at axis
        k = npad // tile
        y = y.reshape(y.shape[:axis] + (nproc, k // nproc, tile) + y.shape[axis + 2 :])
        y = jnp.swapaxes(y, axis, axis + 1)
        y = y.reshape(y.shape[:axis] + (npad,) + y.shape[axis + 3 :])
    y = jax.lax.slice_in_dim(y, 0, n, axis=axis)
    if nproc > 1:
        size = n // nproc
        y = jax.lax.dynamic_slice_in_dim(y, index(axes) * size, size, axis=axis)
    return y


def cyclic_matrix(a, grid, n: int, npad: int, tile: int, pad_value=None):
    """The local natural-order block-cyclic block of diag(A, c I) (padded), row-major like `a`;
    ``c`` is ``pad_value`` (a scalar, default 1)."""
    x = to_cyclic(a, -2, grid.row_axes, grid.nprow, n, npad, tile)
    x = to_cyclic(x, -1, grid.col_axes, grid.npcol, n, npad, tile)
    if npad > n:
        i, j = index(grid.row_axes), index(grid.col_axes)
        r = jnp.arange(x.shape[-2])
        c = jnp.arange(x.shape[-1])
        gr = ((r // tile) * grid.nprow + i) * tile + r % tile
        gc = ((c // tile) * grid.npcol + j) * tile + c % tile
        pad_diag = (gr[:, None] == gc[None, :]) & (gr[:, None] >= n)
        c = jnp.ones((), x.dtype) if pad_value is None else jnp.asarray(pad_value, x.dtype)
        x = jnp.where(pad_diag, c, x)
    return x


# --- Right-hand sides: whole (n, nrhs) arrays <-> the rows a member holds in cuSOLVERMp's layout ---
# (rows block-cyclic over the pr process rows, valid on process column 0)


def rows_of(bc, j, n, tile, pr):
    """Process row ``j``'s rows of a whole (n, nrhs) right-hand side, natural block-cyclic order."""
    k = n // tile
    bl = bc.reshape(k // pr, pr, tile, bc.shape[-1])
    return jax.lax.dynamic_index_in_dim(bl, j, axis=1, keepdims=False).reshape(n // pr, bc.shape[-1])


def solution_rows(xl, grid):
    """The solution's local rows are valid on process column 0 (mesh row index 0): share them."""
    if grid.row_axes:
        i = index(grid.row_axes)
        xl = jnp.where(i == 0, xl, jnp.zeros((), xl.dtype))
        xl = jax.lax.psum(xl, name(grid.row_axes))
    return xl


def whole_rows(xl, grid, n, tile, pr):
    """Inverse of rows_of, from the local rows valid on process column 0."""
    xl = solution_rows(xl, grid)
    if pr == 1:
        return xl
    k = n // tile
    xg = jax.lax.all_gather(xl, name(grid.col_axes), axis=0, tiled=False)
    return xg.reshape(pr, k // pr, tile, xl.shape[-1]).transpose(1, 0, 2, 3).reshape(n, xl.shape[-1])


def block_rows(bc, grid, n):
    """This member's rows of a whole (n, nrhs) ``bc`` in a block layout over the pr process rows:
    rows ``[p * n/pr, (p + 1) * n/pr)``; they are the rows of block-cyclic tiles ``l * pr + p`` of
    the tile-permuted problem (:func:`tile_permutation`)."""
    pr, _ = mp_grid(grid)
    if pr == 1:
        return bc
    return jax.lax.dynamic_slice_in_dim(bc, index(grid.col_axes) * (n // pr), n // pr, axis=0)


def block_whole(xl, grid, n):
    """Inverse of block_rows: the whole solution from the local rows valid on process column 0."""
    pr, _ = mp_grid(grid)
    xl = solution_rows(xl, grid)
    if pr == 1:
        return xl
    return jax.lax.all_gather(xl, name(grid.col_axes), axis=0, tiled=True)


def tile_permutation(n: int, tile: int, nproc: int) -> np.ndarray:
    """``s`` with ``s[g]`` the block-layout index of block-cyclic index ``g`` (``nproc`` processes,
    square tiles of ``tile``): block-cyclic tile ``g`` is block tile
    ``sigma(g) = (g % nproc) * (k / nproc) + g // nproc`` of ``k = n / tile`` tiles. So a block
    layout of ``M`` is the block-cyclic layout of ``M[s][:, s']`` (``s'`` for the columns)."""
    k = n // tile
    g = np.arange(n)
    t = g // tile
    return ((t % nproc) * (k // nproc) + t // nproc) * tile + g % tile


# --- The family classes' common part ---


@dataclasses.dataclass(frozen=True)
class GridKernels:
    """What the native family classes share: the plan (hashable: the classes are static arguments
    of the derivative rules) and the running of a per-shard kernel over its grid."""

    plan: KernelPlan

    @property
    def grid(self) -> _sharded.Grid:
        assert self.plan.grid is not None, "native kernels run on a distributed plan, which has a grid"
        return self.plan.grid

    @property
    def caller(self) -> _sharded.Block:
        """A matrix output returned in the caller's layout of ``a``."""
        return _sharded.Block(self.plan.spec)

    def params(self) -> dict:
        """The static keywords every kernel of the family takes."""
        return {"tile": self.plan.tile}

    def run(
        self,
        kernel,
        args,
        inputs,
        outputs,
        shapes: Optional[Sequence[tuple]] = None,
        names: Optional[Sequence[str]] = None,
        **params,
    ):
        """``kernel`` over the grid (``jaxmg._sharded.run``); ``shapes``/``names`` describe outputs
        that the grid's layout must divide."""
        if shapes is not None:
            assert names is not None, "outputs checked against shapes are named"
            _sharded.check_outputs(outputs, shapes, self.grid, names)
        return _sharded.run(kernel, self.grid, args, inputs, outputs, **self.params(), **params)
