"""The native Cholesky family: cuSOLVERMp potrf/potrs through the handlers of csrc/cholesky.cc.

How one call runs (each kernel below runs on every device inside ``shard_map``):

1. **Grid bootstrap**: ``_grid.start`` (see ``_grid``).

2. **Layout without a second copy** (when the local extents are whole tiles and the grid is
   square or 1-D). A row-major local block of ``A`` is
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
   (``input_output_aliases``; XLA honours the donation where an output of the public call, the
   factor state, can take the buffer); without donation XLA copies ``a`` first.

3. **Natural order** (``natural=True``, the other grids, and the fused ``potrs`` when a local
   extent is not a multiple of ``T_A``). The matrix is redistributed in JAX into the
   natural-order block-cyclic layout (one ``all_to_all`` per distributed dimension when each
   process's tile count is a multiple of the process count, else a gather; ``diag(A, I)``
   padded to a multiple of ``T_A * lcm(nprow, npcol)`` for the fused ``potrs``; the family
   instead uses the largest tile <= ``T_A`` dividing both local extents, so its state keeps
   ``a``'s local shape), factored in place with ``uplo=UPPER`` (the upper factor ``U`` of
   ``conj(A)`` is ``L^T``, whose column-major storage is exactly ``L``'s row-major storage, so no
   transpose is needed), and redistributed back for ``L``.

Status: 0, or the order of a leading minor that is not positive definite, counted in the
(permuted, padded) matrix that cuSOLVERMp factors (``N + 1`` where cuSOLVERMp 0.8 reports the
failure without ``info``). Outputs are NaN whenever status != 0; the grid stays usable.

Kernels: ``potrs`` (fused factor and solve, for ``jaxmg.ops.local``) and the family
``cholesky_factor``/``_solve``/``_logdet``/``_lower``/``_triangle``/``_to_a_order`` on a saved
state (step 2's factor, or step 3's with ``natural=True``), which :class:`Cholesky` runs over the
grid for ``jaxmg.Cholesky`` and ``jaxmg.potrs``.

Batching: a leading unsharded batch axis reaches the FFI call (``vmap_method="expand_dims"``)
and the handler loops over it on one cached grid.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..._sharded import Block, Replicated, Rows, whole
from .. import cyclic, triangular
from ..families import CholeskyState
from ..ffi import gemm
from ..ffi._codes import CODES
from . import _grid

# The handlers' ``uplo`` and ``mode`` (csrc/codes.h).
_UPLO_LOWER = CODES["uplo_lower"]
_UPLO_UPPER = CODES["uplo_upper"]
_MODE_NATURAL = CODES["cholesky_natural"]
_MODE_INPLACE = CODES["cholesky_in_place"]


def _handler_call(m, b_m, members, nid, rank, *, factor: bool, n, tile, pr, pc, mode, solve):
    """One call of the Cholesky handlers. ``factor``: jaxmg_potrf factors ``m`` (and solves) in
    place, returning (factor, x, local log det, status); else jaxmg_potrs solves with ``m``, a
    factor jaxmg_potrf made (read only), returning (x, local log det, status 0). ``m`` is
    (nloc, mloc) row-major = the matrix's column-major local block; b_m is (nrhs, mloc)."""
    real = jnp.finfo(m.dtype).dtype
    results = (
        jax.ShapeDtypeStruct(b_m.shape, b_m.dtype),
        jax.ShapeDtypeStruct((), real),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    return _grid.ffi_call(
        "jaxmg_potrf" if factor else "jaxmg_potrs",
        (jax.ShapeDtypeStruct(m.shape, m.dtype), *results) if factor else results,
        (m, b_m),
        (members, nid, rank),
        aliases={0: 0, 1: 1} if factor else {1: 0},
        **_attrs(m, b_m, n, tile, pr, pc, mode, solve),
    )


def _attrs(a_m, b_m, n, tile, pr, pc, mode, solve):
    """The handlers' attributes (csrc/README.md)."""
    return dict(
        n=n,
        tile=tile,
        pr=pr,
        pc=pc,
        mloc=a_m.shape[-1],
        nloc=a_m.shape[-2],
        nrhs=b_m.shape[-2] if solve else 1,
        mode=mode,
        solve=solve,
        uplo=_UPLO_LOWER if mode == _MODE_INPLACE else _UPLO_UPPER,
    )


# --- Kernels ---


def _inplace_ok(n: int, tile: int, grid) -> bool:
    pr, pc = _grid.mp_grid(grid)
    if (n // pr) % tile or (n // pc) % tile:
        return False
    return pr == pc or pr == 1 or pc == 1


def _logdet_sum(logdet, grid):
    """log det A from each member's sum of the logs of its diagonal entries of the factor."""
    axes = _grid.grid_axes(grid)
    return 2 * (jax.lax.psum(logdet, _grid.name(axes)) if axes else logdet)


def _permuted_rows(bc, grid, n: int, tile: int):
    """This member's right-hand-side rows for the in-place (permuted) layout, from a whole
    (n, nrhs) ``bc``: the rows of its block (a row-distributed grid), or all rows in the
    permuted order ``sigma`` (a column-distributed 1-D grid, whose tiles the handler reorders)."""
    pr, pc = _grid.mp_grid(grid)
    if pr == 1 and pc > 1:
        return bc[_grid.tile_permutation(n, tile, pc)]
    return _grid.block_rows(bc, grid, n)


def _permuted_whole(xl, grid, n: int, tile: int):
    """Inverse of _permuted_rows: the whole solution from the local rows valid on process column 0."""
    pr, pc = _grid.mp_grid(grid)
    x = _grid.block_whole(xl, grid, n)
    if pr == 1 and pc > 1:
        return jnp.zeros_like(x).at[_grid.tile_permutation(n, tile, pc)].set(x)
    return x


def potrs(a, b, *, grid, tile):
    """Solve A x = b (A Hermitian positive definite, lower triangle read) in one handler call:
    (x, logdet, status). ``a``'s buffer is factored in place where the layout allows it (the
    in-place layout, step 2 of the module docstring); a donated ``a`` is then consumed."""
    tile = int(tile)
    n = a.shape[-2] * grid.nprow
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    bc = jnp.conj(b2)
    pr, pc = _grid.mp_grid(grid)
    members, nid, rank = _grid.start(grid)

    if _inplace_ok(n, tile, grid):
        bl = _permuted_rows(bc, grid, n, tile)
        _, xt, logdet, status = _handler_call(
            a, bl.T, members, nid, rank, factor=True, n=n, tile=tile, pr=pr, pc=pc, mode=_MODE_INPLACE, solve=1
        )
        x = _permuted_whole(xt.T, grid, n, tile)
    else:
        npad = _grid.padded_size(n, tile, grid)
        am = _grid.cyclic_matrix(a, grid, n, npad, tile)
        bl = _grid.rows_of(jnp.pad(bc, ((0, npad - n), (0, 0))), _grid.index(grid.col_axes), npad, tile, pr)
        _, xt, logdet, status = _handler_call(
            am, bl.T, members, nid, rank, factor=True, n=npad, tile=tile, pr=pr, pc=pc, mode=_MODE_NATURAL, solve=1
        )
        x = _grid.whole_rows(xt.T, grid, npad, tile, pr)[:n]
    x = jnp.conj(x)
    status, x, logdet = _grid.agreed(status, grid, x[:, 0] if vector else x, _logdet_sum(logdet, grid))
    return x, logdet, status


# --- The Cholesky family (factor once; then solve, log det, L, inverse from the saved factor) ---
# The state is cuSOLVERMp's factor in a's local block shape (tile ``family_tile``): permuted
# (step 2 of the module docstring; L cannot be read from it) or natural (step 3), chosen by
# ``_permuted`` from static values alone. A failed factorisation leaves the state NaN.


def _permuted(n: int, tile: int, grid, natural: bool) -> bool:
    """Whether the family state is in the permuted (in-place) layout."""
    return not natural and _inplace_ok(n, tile, grid)


def cholesky_state_is_lower(n: int, tile: int, grid, natural: bool = False) -> bool:
    """Whether the factor state of an n x n matrix holds L (natural order), so that
    ``cholesky_lower`` can read it; False for the permuted in-place state."""
    return not _permuted(n, _grid.family_tile(n, int(tile), grid), grid, natural)


def _family_call(local, grid, tile, natural):
    """What each family kernel that calls the handlers starts with: the global size n, the family
    tile, the grid arguments (``_grid.start``) and the handler attributes of the state's layout
    (grid and mode)."""
    n = local.shape[-2] * grid.nprow
    t = _grid.family_tile(n, int(tile), grid)
    mode = _MODE_INPLACE if _permuted(n, t, grid, natural) else _MODE_NATURAL
    pr, pc = _grid.mp_grid(grid)
    return n, t, _grid.start(grid), dict(n=n, tile=t, pr=pr, pc=pc, mode=mode)


def cholesky_factor(a, *, grid, tile, natural=False):
    """Factor A = L L^H (lower triangle read); returns (the backend's factor state, status)."""
    n, t, boot, attrs = _family_call(a, grid, tile, natural)
    dummy = _grid.no_rhs(a)
    if attrs["mode"] == _MODE_NATURAL:
        a = _grid.cyclic_matrix(a, grid, n, n, t)
    f, _, _, status = _handler_call(a, dummy, *boot, factor=True, solve=0, **attrs)
    (status,) = _grid.agreed(status, grid)  # the handler already filled a failed factor with NaN
    return f, status


def cholesky_solve(state, b, *, grid, tile, natural=False):
    """x = A^-1 b from the factor state; b and x whole."""
    n, t, boot, attrs = _family_call(state, grid, tile, natural)
    vector = b.ndim == 1
    bc = jnp.conj(b[:, None] if vector else b)
    if attrs["mode"] == _MODE_INPLACE:
        bl = _permuted_rows(bc, grid, n, t)
    else:
        bl = _grid.rows_of(bc, _grid.index(grid.col_axes), n, t, attrs["pr"])
    xt, _, _ = _handler_call(state, bl.T, *boot, factor=False, solve=1, **attrs)
    if attrs["mode"] == _MODE_INPLACE:
        x = _permuted_whole(xt.T, grid, n, t)
    else:
        x = _grid.whole_rows(xt.T, grid, n, t, attrs["pr"])
    x = jnp.conj(x)
    return (x[:, 0] if vector else x,)


def cholesky_logdet(state, *, grid, tile, natural=False):
    """log det A (real), from the factor's diagonal."""
    _, _, boot, attrs = _family_call(state, grid, tile, natural)
    dummy = _grid.no_rhs(state)
    _, logdet, _ = _handler_call(state, dummy, *boot, factor=False, solve=0, **attrs)
    return (_logdet_sum(logdet, grid),)


def cholesky_lower(state, *, grid, tile, natural=False):
    """The natural-order lower factor L (this device's block), zero above the diagonal."""
    n = state.shape[-2] * grid.nprow
    t = _grid.family_tile(n, int(tile), grid)
    if _permuted(n, t, grid, natural):
        raise ValueError(
            "this Cholesky state is in cuSOLVERMp's permuted in-place layout, from which L cannot "
            "be read; factor with natural=True (jaxmg.Cholesky(a, natural=True)) to read L."
        )
    (f,) = cholesky_triangle(state, grid=grid, tile=tile)
    i, j = _grid.index(grid.row_axes), _grid.index(grid.col_axes)
    rows = i * f.shape[-2] + jnp.arange(f.shape[-2])
    cols = j * f.shape[-1] + jnp.arange(f.shape[-1])
    # a failed factorisation's state is all NaN (the handler fills it): keep it NaN everywhere
    upper = jnp.where(jnp.isnan(f), f, jnp.zeros((), f.dtype))
    return (jnp.where(rows[:, None] >= cols[None, :], f, upper),)


def cholesky_triangle_kind(n: int, tile: int, grid, natural: bool = False) -> tuple[bool, bool]:
    """(lower, reordered) of what :func:`cholesky_triangle` returns for an n x n factor state:
    the natural-order state holds L (A = L L^H); the permuted one holds, in a's row-major view,
    the upper factor U of the tile-permuted matrix (S^T A S = U^H U), whose results
    :func:`cholesky_to_a_order` takes back to a's order."""
    t = _grid.family_tile(n, int(tile), grid)
    permuted = _permuted(n, t, grid, natural)
    return not permuted, permuted


def cholesky_triangle(state, *, grid, tile, natural=False):
    """The factor as a triangular matrix (this device's block of the grid layout; the other
    triangle unspecified) in the order of the factored matrix (a's, or the tile-permuted one):
    the block-cyclic state brought to block layout (one all_to_all per distributed dimension)."""
    n = state.shape[-2] * grid.nprow
    t = _grid.family_tile(n, int(tile), grid)
    f = _grid.from_cyclic(state, -2, grid.row_axes, grid.nprow, n, n, t)
    return (_grid.from_cyclic(f, -1, grid.col_axes, grid.npcol, n, n, t),)


def cholesky_to_a_order(c, *, grid, tile, natural=False):
    """A matrix in the order of the factored matrix (this device's block) taken to a's order:
    for the permuted state, the tile permutation undone (the inverse of
    :func:`cholesky_triangle`'s reordering, the undistributed dimension of a 1-D grid included);
    unchanged for the natural-order state."""
    n = c.shape[-2] * grid.nprow
    t = _grid.family_tile(n, int(tile), grid)
    if not _permuted(n, t, grid, natural):
        return (c,)
    c = _grid.to_cyclic(c, -2, grid.row_axes, grid.nprow, n, n, t)
    c = _grid.to_cyclic(c, -1, grid.col_axes, grid.npcol, n, n, t)
    pr, pc = _grid.mp_grid(grid)
    if pr != pc:  # a 1-D grid: the undistributed dimension was reordered in place by the handler
        perm = _grid.tile_permutation(n, t, max(pr, pc))
        axis = -2 if grid.nprow == 1 else -1
        c = jnp.zeros_like(c).at[(slice(None),) * (c.ndim + axis) + (perm,)].set(c)
    return (c,)


class Cholesky(_grid.GridKernels):
    """The Cholesky kernels over the process grid (``jaxmg.kernels.families.CholeskyKernels``)."""

    hermitian = True

    @property
    def lower_readable(self) -> bool:
        """Whether the state holds L (natural order), so that :meth:`lower` can read it."""
        return cholesky_state_is_lower(self.plan.shape[0], self.plan.tile, self.grid, self.plan.natural)

    def params(self) -> dict:
        return {"tile": self.plan.tile, "natural": self.plan.natural}

    def factor(self, a):
        state, status = self.run(cholesky_factor, [a], [Block()], [Block(), Replicated()])
        return CholeskyState(state), status

    def solve(self, state, b, spec):
        return self.run(cholesky_solve, [state.factor, b], [Block(), Rows(spec)], [Rows(spec)])[0]

    def logdet(self, state):
        return self.run(cholesky_logdet, [state.factor], [Block()], [Replicated()])[0]

    def inverse(self, state):
        """A^-1 in the grid layout, from the factor: LAPACK's potri (the triangular inverse, then
        the product W^H W; (2/3) N^3 flops, almost all in large matrix products) on the whole
        factor in the grid layout (distributed, never gathered), then taken to a's order where
        the state is the factor of a tile-permuted matrix."""
        n = self.plan.shape[0]
        lower, reordered = cholesky_triangle_kind(n, self.plan.tile, self.grid, self.plan.natural)
        (factor,) = self.run(cholesky_triangle, [state.factor], [Block()], [Block()])
        inverse = whole(
            _hermitian_inverse,
            (factor,),
            self.grid,
            lower=lower,
            products=products_on(self.grid, n),
            layout=cyclic.on_grid(self.grid, n),
        )
        if reordered:
            (inverse,) = self.run(cholesky_to_a_order, [inverse], [Block()], [Block()])
        return inverse

    def lower(self, state):
        return self.run(cholesky_lower, [state.factor], [Block()], [self.caller])[0]


def _hermitian_inverse(factor, *, lower: bool, products, layout=None):
    """A^-1 from the triangular ``factor`` (whole, in the grid layout), through ``products``; with
    a ``layout`` (``jaxmg.kernels.cyclic``), computed in its order (the factor reordered first,
    the inverse put back in the natural order)."""
    with triangular.products_through(*products):
        if layout is None:
            return triangular.hermitian_inverse(triangular.Tri(factor, lower=lower))
        with triangular.laid_out(layout):
            inverse = triangular.hermitian_inverse(
                triangular.Tri(layout.reordered(factor), lower=lower), base=layout.base
            )
        return layout.natural(inverse)


def products_on(grid, n: int) -> tuple:
    """The products of the triangular inverses (``triangular.products_through``) of an order-``n``
    matrix on ``grid``: the library's cuBLAS calls where the grid is one GPU, else XLA's dots
    (which XLA partitions over the mesh)."""
    if grid.mesh.size == 1 and gemm.available():
        return gemm.one_gpu_products(n)
    return None, None, None
