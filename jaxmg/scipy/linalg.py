"""``jax.scipy.linalg`` on sharded matrices: JAX's names and signatures over jaxmg.

Change ``import jax.scipy.linalg as sla`` to ``import jaxmg.scipy.linalg as sla``. The
arguments that tune SciPy's LAPACK calls (``overwrite_a``, ``overwrite_b``,
``check_finite``, ``lapack_driver``, ``turbo``, ``lwork``, ``debug``) are accepted and
ignored, as JAX ignores them (``svd``'s ``lapack_driver`` must name one of SciPy's
drivers). Leading batch dimensions are mapped with ``jax.vmap`` as in
:mod:`jaxmg.numpy.linalg`.

``cho_factor(a)`` returns the tuple ``(c, lower)`` whose ``c`` is a :class:`jaxmg.Cholesky`
(the distributed factor, not JAX's array with the factor in one triangle); :func:`cho_solve`
solves with it without refactoring, and given JAX's array factor solves with that factor itself
(two triangular solves). ``lu_factor(a)`` returns JAX's arrays ``(lu, piv)``
(LAPACK's packed factor and row swaps, from the distributed LU where it runs), which
:func:`lu_solve` and :func:`lu` read as JAX's do; a factor kept in cuSOLVERMp's own layout is
:class:`jaxmg.LU`, which :func:`lu_solve` takes too. Every other name of ``jax.scipy.linalg``
is present: :func:`solve_triangular` runs as products over the mesh
(``jaxmg.kernels.triangular.trsm``), the rest are JAX's own functions (docs/numpy.md lists which).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as _jsl
from jax.sharding import NamedSharding as _NamedSharding, PartitionSpec as _P

from .. import _checks, _sharded, functional as _f
from .._context import is_tracer as _is_tracer, manual as _manual
from .._dense import (
    _explicit_mesh,
    adjoint as _H,
    matmul as _matmul,
    spec_of as _spec_of,
)
from .._dispatch import drop_in as _drop_in, warn as _warn
from .._layout import divides as _divides
from .._plan import held_layout as _held_layout
from ..kernels import triangular as _triangular
from ..kernels.algebra import permutation_matrix as _permutation_matrix
from ..kernels.ffi.solver import getrf as _getrf
from ..kernels.varying import alike as _alike
from ..modules import LU as _LU, Cholesky as _Cholesky
from ..modules.cholesky import promoted_solve as _cho_promoted_solve
from ..modules.lu import promoted_solve as _lu_promoted_solve
from ..numpy import _jax_rules, linalg as _np
from ..numpy._util import (
    check_rank_promotion as _check_rank_promotion,
    distributed_mesh as _distributed_mesh,
    herm_input as _herm_input,
    in_layout as _in_layout,
    in_layout_of as _in_layout_of,
    inexact as _inexact,
    map_batch as _map_batch,
    map_solve as _map_solve,
    matrices as _matrices,
    own_mesh as _own_mesh,
    square as _square,
    stack_split as _stack_split,
    take_rows as _take_rows,
)
from . import _lu


@_drop_in(static=("lower",))
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """JAX's ``(c, lower)``: ``c`` = :func:`cholesky` ``(a, lower=lower)``, the Cholesky factor
    of Hermitian positive-definite ``a`` (..., N, N) from its lower triangle (``lower=True``,
    ``a = c c^H``) or its upper one (default, as SciPy; ``a = c^H c``), zero in the other
    triangle, in a's layout; stacks are factored matrix by matrix. Pass the pair to
    :func:`cho_solve`, which solves with the factor itself (two triangular solves, no new
    factorisation). Differentiable as :func:`cholesky`. A factor kept in cuSOLVERMp's own layout,
    with the solve's own derivative rule, is :class:`jaxmg.Cholesky` (``jaxmg.Cholesky(a).solve(b)``),
    which :func:`cho_solve` takes as ``(jaxmg.Cholesky(a), lower)`` too."""
    del overwrite_a, check_finite
    return _cholesky(a, bool(lower), "cho_factor"), bool(lower)


@_drop_in
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a @ x = b`` with ``(c, lower)`` from :func:`cho_factor`: ``c`` (..., N, N) JAX's
    array, the factor in its ``lower`` triangle (the other is not read), x from two triangular
    solves with it (:func:`solve_triangular`'s: on one device the device's, over a mesh by
    blocked substitution, ``c`` never gathered), batched as b, so that x's error grows like
    cond(c) as JAX's, not like cond(c)^2 as a refactorisation of ``c c^H`` would. ``c`` may also
    be a :class:`jaxmg.Cholesky` (a stack of them made under ``jax.vmap``), whose own solve and
    derivative rule are then used. x has b's shape and layout; ``c`` and ``b`` are promoted
    together as JAX promotes them (complex x for a real factor and a complex ``b``)."""
    del overwrite_b, check_finite
    c, lower = c_and_lower
    if isinstance(c, _Cholesky):
        return _each_rhs(c, _cho_promoted_solve, b, "cho_solve", first="c_and_lower")
    c, b, vectors = _triangle_and_rhs(c, b, "cho_solve", first="c_and_lower")
    solve = functools.partial(_cho_solve_with_factor, lower=bool(lower))
    return _vectors_back(_map_solve(solve, (c, b), fold_columns=True), vectors)


def _cho_solve_with_factor(c, b, *, lower: bool):
    """x with ``a x = b`` for ``a = L L^H`` (``lower``: L in c's lower triangle) or ``a = U^H U``
    (U in c's upper triangle), ``c`` (N, N) and ``b`` (N,) or (N, K): ``y = L^-1 b`` then
    ``x = L^-H y`` (upper: ``y = U^-H b``, ``x = U^-1 y``)."""
    first, second = ("N", "C") if lower else ("C", "N")
    y = _triangular_solve(c, b, trans=first, lower=lower, unit=False)
    return _rows_as_factor(_triangular_solve(c, y, trans=second, lower=lower, unit=False), c)


def _each_rhs(module, solve, b, name: str, *, first: str, **static):
    """``solve(module, b, **static)`` (a module's solve of one matrix) of ``b`` (N,) or
    (..., N, K), broadcast as JAX broadcasts its factors (..., N, N) against ``b``: the module's
    stack (a module made for a stack or under ``jax.vmap``, whose ``status`` has the stack's
    shape) and b's leading dimensions are mapped together with ``jax.vmap``; one factor solves
    each matrix of a stack ``b``, and a ``b`` (N,) is one vector for every factor. A ``b`` (..., N)
    of one dimension fewer than the factors is one vector for each of them, with JAX's
    FutureWarning (:func:`_rhs_shape`). On Explicit mesh axes the factors' arrays and b's stack
    are split alike while they are solved (as the factors' largest array, or, for one factor,
    not at all), x then back in b's layout."""
    b = b if isinstance(b, jax.Array) else jnp.asarray(b)
    stack = tuple(jnp.shape(module.status))
    b, vectors = _rhs_shape(stack + tuple(module.shape), b, name, first=first)
    one = functools.partial(solve, **static)
    if not stack and b.ndim <= 2:
        return _vectors_back(one(module, b), vectors)
    rhs_stack = b.shape[:-2]
    batch = tuple(jnp.broadcast_shapes(stack, rhs_stack))
    if stack not in ((), batch):
        module = jax.tree.map(lambda x: jnp.broadcast_to(x, batch + x.shape[len(stack) :]), module)
    # the factors' arrays and b's stack split alike (as the factors' largest array, or not at all)
    lead, widest = (None,) * len(batch), max(jax.tree.leaves(module), key=jnp.ndim)
    if stack:
        lead = (None,) * (len(batch) - len(stack)) + tuple(_spec_of(widest))[: len(stack)]
        module = jax.tree.map(functools.partial(_stack_split, lead=lead[len(batch) - len(stack) :]), module)
    rhs = b
    if rhs_stack:
        rhs = _stack_split(b, lead=lead[len(batch) - len(rhs_stack) :], like=widest if stack else b)
        rhs = rhs if rhs_stack == batch else jnp.broadcast_to(rhs, batch + rhs.shape[-2:])
    for depth in range(len(batch)):
        one = jax.vmap(one, in_axes=(0 if stack else None, 0 if rhs.ndim - 2 > depth else None))
    with _own_mesh((b, *jax.tree.leaves(module))):
        x = one(module, rhs)
    return _vectors_back(_in_layout_of(x, b, matrix=False) if x.shape == b.shape else x, vectors)


@_drop_in(static=("lower",))
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of ``a`` (..., N, N) from one triangle (``lower``; default upper, as
    SciPy): ``L`` with ``a = L L^H``, or ``U`` with ``a = U^H U``. In a's layout."""
    del overwrite_a, check_finite
    return _cholesky(a, bool(lower), "cholesky")


def _cholesky(a, lower: bool, name: str):
    """:func:`cholesky`'s factor (``name``: the function called, for its errors)."""
    (a,) = _inexact(a)
    _square(a, name)
    factor = _map_batch(_f.cholesky, (_herm_input(a, False, lower=lower),), (2,))
    return factor if lower else _in_layout_of(_H(factor), factor)


@_drop_in
def lu_factor(a, overwrite_a=False, check_finite=True):
    """JAX's ``(lu, piv)`` of ``a`` (..., N, N): ``P a = L U`` with partial pivoting, L (unit
    lower, strict lower triangle of ``lu``) and U (upper triangle of ``lu``) packed as LAPACK's
    getrf leaves them, ``piv`` (..., N) int32 the 0-based row swaps. ``lu`` is in a's layout.

    Where :class:`jaxmg.LU` takes the distributed route for one matrix split over a mesh, the
    arrays come from the distributed LU, ``a`` never gathered (:mod:`jaxmg.scipy._lu`; an exactly
    singular ``a`` then gives a NaN factor); elsewhere from the device's getrf, a sharded ``a``
    gathered. A factor kept in cuSOLVERMp's own layout is :class:`jaxmg.LU`
    (``jaxmg.LU(a).solve(b)``), which :func:`lu_solve` takes as ``(jaxmg.LU(a), None)`` too.
    Differentiable as JAX's (the packed factor's tangent). A rectangular ``a`` is JAX's own
    ``jax.scipy.linalg.lu_factor``."""
    del overwrite_a, check_finite
    return _square_lu(a, "lu_factor", _packed_lu, _jsl.lu_factor)


def _square_lu(a, name: str, square, rectangular, error: type[Exception] = TypeError):
    """``square`` of each matrix of ``a`` (..., N, N) mapped over its batch; JAX's
    ``rectangular`` of a rectangular ``a`` (jaxmg's LU is of square matrices); ``error`` (JAX's
    class) for an ``a`` of fewer than two dimensions."""
    (a,) = _inexact(a)
    _checks.check_dtype(a, "a", "lu")
    _matrices(a, name, error)
    if a.shape[-1] != a.shape[-2]:
        return rectangular(a)
    return _map_batch(square, (a,), (2,))


def _packed_lu(a):
    """(lu, piv) of one square matrix: from jaxmg's distributed LU where ``jaxmg.LU`` takes the
    distributed route for it (:mod:`._lu`, a never gathered), else by the device's getrf on a
    gathered copy of ``a``."""
    mesh = _lu.distributed_mesh(a)
    if mesh is None:
        lu, piv = _getrf(_in_layout(a, _P(), a))
        return _in_layout_of(lu, a), piv
    return _lu.packed(a, mesh, _mesh_solve)


def _mesh_solve(t, b, *, lower: bool, unit: bool = False, right: bool = False):
    """``T^-1 b`` (or ``b T^-1`` where ``right``) with a triangle of ``t`` over its mesh."""
    if right:  # b T^-1 = (T^-T b^T)^T
        return _triangular_solve(t, jnp.swapaxes(b, -1, -2), trans="T", lower=lower, unit=unit).swapaxes(-1, -2)
    return _triangular_solve(t, b, trans="N", lower=lower, unit=unit)


_TRANS = {0: "N", 1: "T", 2: "C", "N": "N", "T": "T", "C": "C"}


@_drop_in(static=("trans",))
def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``op(a) @ x = b`` with JAX's ``(lu, piv)`` from :func:`lu_factor`; op by ``trans``:
    0 (a), 1 (a^T) or 2 (a^H). ``lu`` (..., N, N), ``b`` (N,) or (..., N, K); ``x`` has b's shape
    and layout. Two triangular solves with the factor as :func:`solve_triangular` runs them (over
    the factor's mesh, no refactoring), differentiable in ``lu`` and ``b``. ``lu`` may also be a
    :class:`jaxmg.LU` (``piv`` then unused): its saved, possibly distributed, factor solves. The
    factor and ``b`` are promoted together as JAX promotes them (x has their common dtype)."""
    del overwrite_b, check_finite
    if isinstance(trans, str) or trans not in _TRANS:  # JAX's lu_solve takes the integers alone
        raise ValueError(
            f"'trans' value must be 0, 1, or 2, got {trans!r} (lu_solve: 0 solves a x = b, 1 a^T x = b, 2 a^H x = b)."
        )
    lu, piv = lu_and_piv
    if isinstance(lu, _LU):
        return _each_rhs(lu, _lu_promoted_solve, b, "lu_solve", first="lu_and_piv", trans=_TRANS[trans])
    lu, b, vectors = _triangle_and_rhs(lu, b, "lu_solve", first="lu_and_piv")
    perm = jax.lax.linalg.lu_pivots_to_permutation(jnp.asarray(piv), lu.shape[-1])
    fn = functools.partial(_packed_lu_solve, trans=_TRANS[trans])
    # eagerly on Auto axes the permuted rows come back replicated: x is put in b's layout
    x = _map_solve(fn, (lu, perm, b), fold_columns=True)
    return _vectors_back(_in_layout_of(x, b, matrix=False), vectors)


def _packed_lu_solve(lu, perm, b, *, trans: str):
    """op(a)^-1 b for one packed factor ``a[perm] = L U``: two triangular solves with the factor
    (:func:`solve_triangular`'s, over a's mesh), the rows of b or x permuted."""
    tri = functools.partial(_triangular_solve, trans=trans)
    if trans == "N":
        x = tri(lu, tri(lu, _take_rows(b, perm), lower=True, unit=True), lower=False, unit=False)
    else:
        z = tri(lu, tri(lu, b, lower=False, unit=False), lower=True, unit=True)
        x = _take_rows(z, jnp.argsort(perm))
    return _rows_as_factor(x, lu)


@_drop_in(static=("lower", "assume_a"))
def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False, check_finite=True, assume_a="gen"):
    """Solve ``a @ x = b``: LU for ``assume_a`` "gen", "sym" or "her"; Cholesky for "pos" (from
    a's ``lower`` triangle, default upper, as SciPy). Shapes as :func:`jaxmg.numpy.linalg.solve`.

    The derivative is JAX's: for "pos" that of the full matrix, ``x' = H^-1 (b' - a' x)`` with
    ``H`` the Hermitian matrix read (one factorisation, :mod:`jaxmg.numpy._jax_rules`)."""
    del overwrite_a, overwrite_b, debug, check_finite
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise ValueError(f"solve: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}.")
    if assume_a != "pos":
        return _np.solve(a, b)
    a, b = _inexact(a, b)
    _square(a, "solve")
    vectors = _positive_rhs(a.shape, b.shape)
    solve = functools.partial(_jax_rules.positive_solve, lower=bool(lower))
    return _vectors_back(_map_solve(solve, (a, b[..., None] if vectors else b)), vectors)


def _positive_rhs(a_shape: tuple, b_shape: tuple) -> bool:
    """Whether ``b`` is a batch of vectors (..., N) for ``solve(assume_a="pos")``, which takes, as
    JAX's, ``b`` (..., N) of one dimension fewer than ``a`` (..., N, N) or (..., N, K) of as many;
    else JAX's ``ValueError``."""
    n = a_shape[-1]
    if len(b_shape) not in (len(a_shape), len(a_shape) - 1) or b_shape[len(a_shape) - 2] != n:
        raise ValueError(
            f"solve(assume_a='pos'): b must be (..., {n}) or (..., {n}, K) with as many batch dimensions as a "
            f"(as in jax.scipy.linalg.solve), got a of shape {a_shape} and b of shape {b_shape}."
        )
    return len(b_shape) == len(a_shape) - 1


@_drop_in
def inv(a, overwrite_a=False, check_finite=True):
    """The inverse of square ``a`` (..., N, N) in a's layout: :func:`jaxmg.numpy.linalg.inv`."""
    del overwrite_a, check_finite
    return _np.inv(a)


@_drop_in
def det(a, overwrite_a=False, check_finite=True):
    """The determinant of square ``a`` (..., N, N): :func:`jaxmg.numpy.linalg.det`."""
    del overwrite_a, check_finite
    return _np.det(a)


@_drop_in(static=("lower", "eigvals_only", "eigvals", "type"))
def eigh(
    a,
    b=None,
    lower=True,
    eigvals_only=False,
    overwrite_a=False,
    overwrite_b=False,
    turbo=True,
    eigvals=None,
    type=1,
    check_finite=True,
):
    """Eigenvalues ``w`` (ascending), and eigenvectors ``v`` in a's layout unless
    ``eigvals_only``, of Hermitian ``a`` (..., N, N): ``a v = v diag(w)`` by syevd, or with
    ``b`` (Hermitian positive definite, batch dimensions broadcast against a's) the problem of
    ``type``: 1, ``a v = b v diag(w)`` by sygvd; 2, ``a b v = v diag(w)``; 3,
    ``b a v = v diag(w)``. Eigenvectors are normalised as JAX's: ``v^H b v = I`` for types 1
    and 2, ``v^H b^-1 v = I`` for type 3.

    As JAX does, ``(a + a^H)/2`` (and ``(b + b^H)/2``) is decomposed, so that the result and
    its derivative are those of a Hermitian matrix; ``lower`` is accepted for the signature.
    ``eigvals`` must be None."""
    del lower, overwrite_a, overwrite_b, turbo, check_finite
    if eigvals is not None:
        raise NotImplementedError("eigh: only eigvals=None is implemented (as in JAX); slice the result.")
    if type not in (1, 2, 3):
        raise ValueError(f"eigh: type must be 1 (a v = w b v), 2 (a b v = w v) or 3 (b a v = w v), got {type!r}.")
    matrices = _inexact(a) if b is None else _inexact(a, b, matrices=2)
    for x, name in zip(matrices, ("eigh", "eigh (b)")):
        _square(x, name)
    matrices = tuple(_herm_input(x, True, lower=True) for x in matrices)
    vectors = not eigvals_only
    if b is None or type == 1:
        fn = functools.partial(_f.syevd if b is None else _f.sygvd, return_eigenvectors=vectors)
    else:
        fn = functools.partial(_eigh_of_product, third=type == 3, vectors=vectors)
    _check_rank_promotion(matrices, (2,) * len(matrices))
    return _map_batch(fn, matrices, (2,) * len(matrices))


def _eigh_of_product(a, b, *, third: bool, vectors: bool):
    """Eigenvalues (and eigenvectors) of ``a b`` (type 2) or ``b a`` (``third``, type 3) for one
    Hermitian a and Hermitian positive definite b = L L^H: those of the Hermitian
    ``C = L^H a L``, with ``v = L^-H y`` (type 2) or ``v = L y`` (type 3) for C's eigenvectors
    y; every step distributed (jaxmg's Cholesky, products in a's layout, syevd, triangular
    solve) and differentiable through its own rule."""
    spec = _spec_of(a)
    l_factor = _f.cholesky(b)
    c = _matmul(_H(l_factor), _matmul(a, l_factor, spec), spec)
    c = _herm_input(c, True, lower=True)
    if not vectors:
        return _f.syevd(c, return_eigenvectors=False)
    w, y = _f.syevd(c)
    v = _matmul(l_factor, y, spec) if third else _triangular_solve(l_factor, y, trans="C", lower=True, unit=False)
    return w, _in_layout_of(v, a)


@_drop_in(static=("full_matrices", "compute_uv"))
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """``(u, s, vh)`` (or ``s`` with ``compute_uv=False``) of ``a`` (..., M, N), tall, square or
    wide: :func:`jaxmg.numpy.linalg.svd`, as a plain tuple (as JAX)."""
    del overwrite_a, check_finite
    if lapack_driver not in ("gesdd", "gesvd"):
        raise ValueError(f"svd: lapack_driver must be 'gesdd' or 'gesvd', got {lapack_driver!r}.")
    out = _np.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(out) if compute_uv else out


@_drop_in(static=("mode", "pivoting"))
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """The QR decomposition of ``a`` (..., M, N), tall, square or wide, in a's layout.

    ``mode="full"`` (default): ``(q, r)`` with q (M, M) and r (M, N); ``"economic"``: q (M, K),
    r (K, N), K = min(M, N); ``"r"``: ``(r,)`` (full r), by jaxmg's distributed QR. With
    ``pivoting=True`` (``a[:, p] = q r``, p appended to the tuple) it is JAX's own column-pivoted
    QR on one device (cuSOLVERMp has no pivoted QR). ``"raw"`` is refused, as by JAX.
    """
    del overwrite_a, lwork, check_finite
    modes = {"full": "complete", "economic": "reduced", "r": "r"}
    if mode not in modes:
        raise ValueError(f"qr: mode must be 'full', 'economic' or 'r' (as jax.scipy.linalg.qr), got {mode!r}.")
    if pivoting:
        return _jsl.qr(a, mode=mode, pivoting=True)
    if mode == "r":
        return (_full_r(a),)
    return tuple(_np.qr(a, mode=modes[mode]))


def _full_r(a):
    """R (..., M, N) of the full QR of ``a`` (..., M, N), in a's layout: the reduced R with the
    M - N zero rows of a tall ``a`` below it (no M x M Q is formed, nor the QR of an M x M matrix
    that the complete Q of a tall matrix takes on the distributed route)."""
    (a,) = _inexact(a)
    _matrices(a, "qr")
    r = _np.qr(a, mode="r")
    zeros = a.shape[-2] - r.shape[-2]
    if zeros <= 0:
        return r
    return _in_layout_of(jnp.pad(r, [(0, 0)] * (r.ndim - 2) + [(0, zeros), (0, 0)]), a)


@_drop_in(static=("side", "method"))
def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """The polar decomposition of ``a`` (M, N): ``(u, p)`` with ``a = u p`` (``side="right"``,
    M >= N: u with orthonormal columns, p (N, N) Hermitian positive semi-definite) or
    ``a = p u`` (``side="left"``, M <= N: p (M, M)). Both in a's layout, by
    :func:`jaxmg.polar` (the left one from the right one of ``a^H``). ``method`` ("qdwh" or
    "svd") is accepted; jaxmg's own iteration is used, to its own tolerance (``eps`` and
    ``max_iterations`` must be None)."""
    if side not in ("right", "left"):
        raise ValueError(f"polar: side must be 'right' or 'left', got {side!r}.")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"polar: method must be 'qdwh' or 'svd', got {method!r}.")
    if eps is not None or max_iterations is not None:
        raise NotImplementedError(
            "polar: eps and max_iterations are not supported; jaxmg's polar iterates to its own tolerance."
        )
    (a,) = _inexact(a)
    rows, cols = a.shape[-2:] if a.ndim >= 2 else (0, 0)
    if rows < cols if side == "right" else rows > cols:
        fit, other = ("M >= N", "left") if side == "right" else ("M <= N", "right")
        raise NotImplementedError(
            f"polar: side={side!r} takes a (..., M, N) with {fit}, got a of shape {a.shape}; "
            f"pass side={other!r} for this shape."
        )
    if side == "right":
        return _map_batch(_f.polar, (a,), (2,))
    u, p = _map_batch(_f.polar, (_H(a),), (2,))  # a^H = u p, so a = p u^H
    return _in_layout_of(_H(u), a), _in_layout_of(p, a)


@_drop_in
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True, lapack_driver=None):
    """``(x, residues, rank, s)`` as ``scipy.linalg.lstsq`` (JAX has no scipy lstsq): the
    least-squares solution of least norm for ``a`` (M, N) of any shape and rank, from jaxmg's SVD.

    ``cond`` is the relative cutoff for small singular values (those below ``cond * s[0]`` count as
    zero), SciPy's default the dtype's eps. ``residues`` is SciPy's: for M > N the squared norm of
    ``b - a x`` per column of ``b`` (a scalar for a vector ``b``), NaN where the rank is below N
    (LAPACK makes no promise there); for M <= N empty (0,). Its shape depends on the shapes alone,
    so that it works inside ``jax.jit``."""
    del overwrite_a, overwrite_b, check_finite, lapack_driver
    a, b = _inexact(a, b)
    x, residues, rank, s = _np.lstsq(a, b, rcond=-1.0 if cond is None else cond)  # -1: the dtype's eps
    m, n = a.shape
    if m <= n:
        return x, jnp.zeros((0,), residues.dtype), rank, s
    residues = jnp.where(rank < n, jnp.nan, residues).astype(residues.dtype)
    return x, (residues[0] if b.ndim == 1 else residues), rank, s


__all__ = [
    "cho_factor",
    "cho_solve",
    "cholesky",
    "det",
    "eigh",
    "inv",
    "lstsq",
    "lu_factor",
    "lu_solve",
    "polar",
    "qr",
    "solve",
    "svd",
]


# --- Triangular solves and the LU decomposition as matrices: jaxmg's --------------------------


@_drop_in(static=("trans", "lower", "unit_diagonal"))
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, debug=None, check_finite=True):
    """Solve ``op(a) @ x = b`` for triangular ``a`` (..., N, N), op by ``trans``: 0 (a), 1 (a^T)
    or 2 (a^H); only a's ``lower`` (default upper) triangle is read, its diagonal taken as ones
    where ``unit_diagonal``. ``b`` is (N,) or (..., N, K); ``x`` has b's shape and layout.

    An ``a`` split over several devices (Explicit mesh axes, or eagerly) is solved by recursive
    blocked substitution (``jaxmg.kernels.triangular.trsm``): diagonal blocks of up to 1,024
    rows by one device's triangular solve, every other flop in products that XLA partitions
    over a's mesh, so that ``a`` is not gathered; an ``a`` on one device by its triangular solve.
    Differentiable in ``a`` and ``b`` (forward and reverse, as JAX's)."""
    del overwrite_b, debug, check_finite
    if trans not in _TRANS:
        raise ValueError(f"solve_triangular: trans must be 0, 1 or 2 ('N', 'T', 'C'), got {trans!r}.")
    a, b, vectors = _triangle_and_rhs(a, b, "solve_triangular", first="a")
    fn = functools.partial(_placed_triangular_solve, trans=_TRANS[trans], lower=bool(lower), unit=bool(unit_diagonal))
    return _vectors_back(_map_solve(fn, (a, b), fold_columns=True), vectors)


def _placed_triangular_solve(a, b, **options):
    """:func:`_triangular_solve`'s x, with its rows laid out as a solution (:func:`_rows_as_factor`)."""
    return _rows_as_factor(_triangular_solve(a, b, **options), a)


def _triangle_and_rhs(a, b, name: str, *, first: str):
    """``a`` (..., N, N) and ``b`` promoted together, their shapes checked, and whether ``b`` is a
    batch of vectors: ``b`` is (N,) or (..., N, K), or, as JAX's ``name`` (whose ``first`` argument
    holds ``a``) reads a ``b`` (..., N) of one dimension fewer than ``a``, one vector for each
    matrix, then returned as (..., N, 1) (undone by :func:`_vectors_back`), with JAX's
    FutureWarning."""
    a, b = _inexact(a, b)
    _square(a, name)
    b, vectors = _rhs_shape(a.shape, b, name, first=first)
    return a, b, vectors


def _rhs_shape(a_shape: tuple, b, name: str, *, first: str):
    """``b`` checked against factors of shape ``a_shape`` (..., N, N), and whether it is a batch
    of vectors (:func:`_triangle_and_rhs`), then returned as (..., N, 1)."""
    vectors = b.ndim > 1 and len(a_shape) == b.ndim + 1 and b.shape[-1] == a_shape[-1]
    if vectors:
        _warn(
            f"jax.scipy.linalg.{name}: batched 1D solves with b.ndim > 1 are deprecated, and in the future "
            f"will be treated as a batched 2D solve. Use {name}({first}, b[..., None]).squeeze(-1) to avoid this "
            "warning.",
            FutureWarning,
        )
    if b.ndim < 1 or b.shape[-1 if b.ndim == 1 or vectors else -2] != a_shape[-1]:
        raise ValueError(
            f"{name}: b must be (N,) or (..., N, K) with N = {a_shape[-1]} (the matrix's order), got shape {b.shape}."
        )
    return (b[..., None] if vectors else b), vectors


def _vectors_back(x, vectors: bool):
    """The solutions of a batch of vectors (:func:`_triangle_and_rhs`) as (..., N); else ``x``."""
    return x[..., 0] if vectors else x


def _triangular_solve(a, b, *, trans: str, lower: bool, unit: bool):
    """op(a)^-1 b for one matrix. A matrix split over several devices goes through
    ``jaxmg.kernels.triangular.trsm`` (a^T x = b as conj(a^H conj(x)) = conj(b); on Explicit
    mesh axes traced with the axes Auto, x in b's layout); one on one device (or inside
    ``jax.jit`` on Auto axes) through the device's triangular solve."""
    vector = b.ndim == 1
    a, b = _alike(a, b)  # inside a shard_map, a and b vary alike (as x and the product with a do)

    def body(a, b):
        rhs = b[:, None] if vector else b
        rhs = jnp.conj(rhs) if trans == "T" else rhs
        x = _triangular.trsm(_triangular.Tri(a, lower=lower != (trans != "N"), adj=trans != "N", unit=unit), rhs)
        x = jnp.conj(x) if trans == "T" else x
        return x[:, 0] if vector else x

    if not _spread(a):  # on one device: its triangular solve, in one call, then x in b's layout
        rhs = b[:, None] if vector else b
        x = _triangular.triangular_solve(
            a,
            _whole_rows(rhs),
            left_side=True,
            lower=lower,
            unit_diagonal=unit,
            transpose_a=trans != "N",
            conjugate_a=trans == "C",
        )
        x = _in_layout_of(x, rhs, matrix=False)
        return x[:, 0] if vector else x
    mesh = _explicit_mesh(a) or _explicit_mesh(b)
    if mesh is None:
        return body(a, b)
    context = jax.set_mesh(mesh) if isinstance(mesh, jax.sharding.Mesh) else _sharded.abstract_context(mesh)
    with context:
        return _sharded.auto_axes(body, mesh, _NamedSharding(mesh, _spec_of(b)))(a, b)


def _rows_as_factor(x, factor):
    """Inside ``jax.jit`` on Auto mesh axes, a solution ``x`` (N,) or (N, K) with one factor
    (N, N) with its rows split as the factor's rows are held (the caller's layout where known,
    else jaxmg's: the mesh's axes in order), as jaxmg's own solves return theirs; elsewhere, and
    where that layout does not divide x, unchanged."""
    layout = _held_layout(factor)
    if layout is None or _explicit_mesh(x) is not None:
        return x
    spec = _P(layout.spec[0], *(None,) * (x.ndim - 1))
    return _sharded.place(x, spec, layout.mesh) if _divides(x.shape, spec, layout.mesh) else x


def _whole_rows(x):
    """``x`` (N, K) with its rows on every device where its layout splits them (the rows a
    triangular solve contracts): by its type on Explicit mesh axes, by its placement eagerly;
    elsewhere unchanged."""
    mesh = _explicit_mesh(x)
    if mesh is not None:
        spec = list(_spec_of(x))
        if spec[-2] is None:
            return x
        spec[-2] = None
        return jax.sharding.reshard(x, _NamedSharding(mesh, _P(*spec)))
    sharding = getattr(x, "sharding", None)
    if _is_tracer(x) or not isinstance(sharding, _NamedSharding):
        return x
    spec = list(sharding.spec) + [None] * (x.ndim - len(sharding.spec))
    if spec[-2] is None:
        return x
    spec[-2] = None
    return jax.device_put(x, _NamedSharding(sharding.mesh, _P(*spec)))


def _spread(a) -> bool:
    """Whether ``a`` is known to be split over several devices: by its type on Explicit mesh axes,
    or by its placement eagerly; inside ``jax.jit`` on Auto axes (where its layout is XLA's to
    choose), where jaxmg factors a matrix of a's order over the mesh of several devices that the
    call finds (the distributed route of ``jaxmg.Cholesky``), so that a factor made there is
    never gathered for its solves. Inside a ``jax.shard_map`` a matrix is the device's own: one split over free
    Explicit axes is gathered for the device's solve, as every solver of jaxmg gathers it there."""
    if _manual():
        return False
    mesh = _explicit_mesh(a)
    sharding = jax.typeof(a).sharding if mesh is not None else getattr(a, "sharding", None)
    if _is_tracer(a) and mesh is None:
        found = _distributed_mesh(a, "Cholesky") if a.ndim == 2 else None
        return found is not None and found.size > 1
    spec = getattr(sharding, "spec", None)
    if spec is None or sharding is None:
        return False
    return any(e is not None for e in spec) and sharding.mesh.size > 1


@_drop_in(static=("permute_l",))
def lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """``(p, l, u)`` with ``a = p @ l @ u`` (or ``(p @ l, u)`` with ``permute_l``) for ``a``
    (..., N, N): p a permutation matrix, l unit lower and u upper triangular, unpacked from
    :func:`lu_factor` (jaxmg's LU, differentiable as JAX's). A rectangular ``a`` is JAX's own
    ``jax.scipy.linalg.lu``."""
    del overwrite_a, check_finite
    return _square_lu(
        a,
        "lu",
        functools.partial(_plu, permute_l=bool(permute_l)),
        functools.partial(_jsl.lu, permute_l=bool(permute_l)),
        ValueError,  # as JAX's lu, which maps over (..., M, N) with jnp.vectorize
    )


def _plu(a, *, permute_l: bool):
    """(p, l, u) (or (p l, u)) of one square matrix from its packed factor, in a's layout."""
    packed, piv = _packed_lu(a)
    n = a.shape[-1]
    perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)  # a[perm] = l u
    l = jnp.tril(packed, -1) + jnp.eye(n, dtype=a.dtype)
    u = jnp.triu(packed)
    if permute_l:
        # p l: row perm[i] of it is row i of l, so row j is row argsort(perm)[j] (a gather, in l's layout)
        return _in_layout_of(_take_rows(l, jnp.argsort(perm)), a), _in_layout_of(u, a)
    real = jnp.finfo(a.dtype).dtype  # p is real for a complex a, as JAX's
    p = jnp.swapaxes(_permutation_matrix(perm, real), -1, -2)  # p[perm[j], j] = 1
    return tuple(_in_layout_of(x, a) for x in (p, l, u))


# --- JAX's own functions, on one device (docs/numpy.md): no distributed form in jaxmg ---------

block_diag = _jsl.block_diag
circulant = _jsl.circulant
companion = _jsl.companion
convolution_matrix = _jsl.convolution_matrix
dft = _jsl.dft
eigh_tridiagonal = _jsl.eigh_tridiagonal
expm = _jsl.expm
expm_frechet = _jsl.expm_frechet
fiedler = _jsl.fiedler
fiedler_companion = _jsl.fiedler_companion
funm = _jsl.funm
hadamard = _jsl.hadamard
hankel = _jsl.hankel
helmert = _jsl.helmert
hessenberg = _jsl.hessenberg
hilbert = _jsl.hilbert
invhilbert = _jsl.invhilbert
invpascal = _jsl.invpascal
leslie = _jsl.leslie
pascal = _jsl.pascal
qr_multiply = _jsl.qr_multiply
rsf2csf = _jsl.rsf2csf
schur = _jsl.schur
solve_sylvester = _jsl.solve_sylvester
sqrtm = _jsl.sqrtm
toeplitz = _jsl.toeplitz

#: The names of ``jax.scipy.linalg`` that are JAX's own functions here (docs/numpy.md's table).
JAX_OWN = (
    "block_diag",
    "circulant",
    "companion",
    "convolution_matrix",
    "dft",
    "eigh_tridiagonal",
    "expm",
    "expm_frechet",
    "fiedler",
    "fiedler_companion",
    "funm",
    "hadamard",
    "hankel",
    "helmert",
    "hessenberg",
    "hilbert",
    "invhilbert",
    "invpascal",
    "leslie",
    "pascal",
    "qr_multiply",
    "rsf2csf",
    "schur",
    "solve_sylvester",
    "sqrtm",
    "toeplitz",
)

__all__ += ["lu", "solve_triangular", *JAX_OWN]


def __dir__() -> list:
    """The module's public names, as ``dir(jax.scipy.linalg)`` lists JAX's (not its imports)."""
    return sorted(__all__)
