"""The functional API: each solver is one of the factorisation modules, used once.

``potrs(a, b)`` is ``Cholesky(a).solve(b)``, ``lu_solve`` is ``LU(a).solve(b)``, and so
on: one implementation, the same derivatives. Shapes, layouts and keywords are those
users of distributed JAX solvers already write (see the README's table).
"""

from __future__ import annotations

import functools

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from . import _layout, _sharded
from ._call import pick
from ._checks import check_flag
from ._docstrings import shared_arguments
from ._typing import Matrix, MeshLike, Rhs, Specs, SquareMatrix, TallMatrix, TallRhs, Tile, checked
from .kernels import status as _status
from .modules import LU, QR, SVD, Cholesky, Eigh, Polar
from .modules.qr import wide_factors


def _flags(**flags) -> None:
    for name, value in flags.items():
        check_flag(value, name)


def _hashable(*args) -> bool:
    try:
        hash(args)
    except TypeError:  # e.g. malformed matrix_specs: the module's checks explain
        return False
    return True


def _known_specs(mesh, matrix_specs, matrices, rhs):
    """``matrix_specs`` for one compiled call: the caller's, else the arrays' own layouts
    (those of sharded matrices, of replicated ones as :class:`_layout.Held`, which are
    computed on the grid's default and returned replicated, and of right-hand sides),
    which inside ``jax.jit`` are unknown on Auto mesh axes."""
    if matrix_specs is not None:
        return tuple(matrix_specs) if isinstance(matrix_specs, list) else matrix_specs
    specs = []
    for x in matrices:
        spec = _layout.caller_spec(x, mesh)
        if spec is not None and not any(_layout.entry_axes(e) for e in spec):
            spec = _layout.Held(spec)
        specs.append(spec)
    specs += [_layout.caller_spec(x, mesh) for x in rhs]
    return None if all(s is None for s in specs) else tuple(specs)


@functools.lru_cache(maxsize=256)
def _jitted(impl, mesh, matrix_specs, donate: tuple, static: tuple):
    return jax.jit(functools.partial(impl, mesh=mesh, matrix_specs=matrix_specs, **dict(static)),
                   donate_argnums=donate)


def _mesh_of_arguments(mesh, arrays):
    """``mesh``, or where it is None and ``a`` (``arrays[0]``) is on no mesh, the mesh of the
    first other argument that is: the operations resolve their mesh from their matrices, so
    a mesh that only ``b`` carries (``jax.jit(jaxmg.potrs)(numpy_a, sharded_b)``) is passed
    on here, as layout rule 3 reads it."""
    if mesh is not None or not arrays or not all(hasattr(x, "shape") for x in arrays):
        return mesh
    if _layout.mesh_of(arrays[0]) is not None:
        return None
    return next((m for m in map(_layout.mesh_of, arrays[1:]) if m is not None), None)


def _compiled(impl, matrices: tuple, rhs: tuple = (), *, mesh, matrix_specs, donate=False, **static):
    """``impl(*matrices, *rhs, mesh=, matrix_specs=, donate=, **static)``, outside ``jax.jit``
    as one compiled call cached on the static arguments.

    Eager calls, and eager ``jax.grad``/``jvp``/... of them (whose tracers hold concrete
    arrays), resolve the mesh and the arrays' layouts here and run one jitted function: JAX
    then differentiates a jitted call, whose derivatives are compiled and cached too, so
    that a second call costs what the jitted one does. Inside ``jax.jit`` (or where the
    mesh is only abstract) ``impl`` is traced into the caller's program. With ``donate`` and
    concrete arrays the matrices are donated to the compiled call.
    """
    arrays = tuple(matrices + rhs)
    static = dict(static, donate=donate)
    direct = functools.partial(impl, mesh=mesh, matrix_specs=matrix_specs, **static)
    if (not all(hasattr(x, "shape") for x in arrays) or not _layout.is_eager(arrays)
            or any(x.ndim != 2 for x in matrices) or any(x.ndim not in (1, 2) for x in rhs)
            or not _hashable(mesh, matrix_specs, tuple(sorted(static.items())))):
        # the operation's checks convert what is not an array, or reject it with a message
        # that names the argument (before any placement could fail on a wrong rank)
        return direct(*arrays, mesh=_mesh_of_arguments(mesh, arrays))
    try:
        own = _layout.resolve_mesh(mesh, arrays[0], arrays[1:])
    except (TypeError, ValueError):  # a bad mesh: the operation's own checks explain
        return direct(*arrays)
    if not isinstance(own, Mesh):
        return direct(*arrays)
    try:
        specs = _known_specs(own, matrix_specs, arrays[: len(matrices)], arrays[len(matrices):])
        placed = _on_mesh(arrays, len(matrices), own, specs)
    except (TypeError, ValueError, AttributeError):
        # bad specs or shapes the mesh does not divide: the operation's own checks raise an
        # error that names the argument and the fix
        return direct(*arrays)
    concrete = not any(isinstance(x, jax.core.Tracer) for x in arrays)
    donated = tuple(range(len(matrices))) if donate and concrete else ()
    fn = _jitted(impl, own, specs, donated, tuple(sorted(static.items())))
    with _sharded.entered(own):  # the arrays' own mesh, whatever the caller's context
        out = fn(*placed)
    if (mesh is None and concrete and not any(getattr(x, "committed", False) for x in arrays)
            and _layout.context_mesh(eager=True) is None):
        # no mesh given and none on the inputs: as with JAX's own operations, uncommitted
        # inputs give uncommitted outputs (on the default device)
        out = _sharded.uncommitted(out)
    return out


def _on_mesh(arrays, count: int, mesh, specs):
    """The arrays (and, under eager transformations, their tangents) on ``mesh``: matrices in
    their own layout or the grid's default, right-hand sides in theirs or replicated; a no-op
    for arrays already there. Arrays on one device (jnp.ones(n), a tangent made with
    jax.device_put(t, device)) can then meet arrays on the mesh in one compiled call."""
    given = specs if isinstance(specs, tuple) else (specs,)
    given = given + (None,) * (len(arrays) - len(given))
    try:
        default = _layout.default_spec(mesh)
    except ValueError:  # a mesh of more than two axes: the operation's checks explain
        return arrays
    placed = []
    for k, (x, spec) in enumerate(zip(arrays, given)):
        if spec is None or isinstance(spec, _layout.Held):
            spec = default if k < count else P()
        placed.append(_sharded.put_eager(x, NamedSharding(mesh, spec)))
    return tuple(placed)


@shared_arguments
@checked
def potrs(a: SquareMatrix, b: Rhs, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_logdet=False,
          return_status=False, donate=False, backend="auto"):
    """Solve ``a @ x = b`` for Hermitian positive-definite ``a`` by Cholesky factorisation.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) in ``a`` and ``b``.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; only its
        lower triangle is read.
      b: the right-hand side, (N,) or (N, NRHS) with a's dtype, sharded ``P(r)``, ``P(r, None)``
        (r: a's row axes) or replicated.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      return_logdet: also return ``log det a`` (real, replicated).
      return_status: also return the status (int32, replicated): 0 on success, else the order of
        the leading minor that is not positive definite (on the native backend counted in
        cuSOLVERMp's permuted order: non-zero, but not LAPACK's number), or -1 for a non-finite
        result. Failed outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``x`` with b's shape and sharding; then ``logdet`` and ``status`` when asked, in that
      order.

    Example (8 devices; ``jax.grad`` works the same eagerly and under ``jax.jit``)::

        >>> import jax, jax.numpy as jnp, numpy as np, jaxmg
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = jax.make_mesh((4, 2), ("x", "y"))
        >>> a = jax.device_put(4 * jnp.eye(8), NamedSharding(mesh, P("x", "y")))
        >>> x, logdet = jaxmg.potrs(a, jnp.ones(8), return_logdet=True)
        >>> print(np.asarray(x)[:2], round(float(logdet), 4))
        [0.25 0.25] 11.0904
        >>> with jax.set_mesh(mesh):
        ...     g = jax.grad(lambda a: jnp.sum(jaxmg.potrs(a, jnp.ones(8))))(a)
        >>> print(np.asarray(g)[:2, :2], tuple(g.sharding.spec))
        [[-0.0625  0.    ]
         [-0.125  -0.0625]] ('x', 'y')

    Only the lower triangle of ``a`` is read, so the derivative with respect to ``a`` is that of
    the function of its lower triangle (as ``jax.scipy.linalg.cho_solve(cho_factor(a,
    lower=True), b)`` gives): zero above the diagonal, and below it the sum of the full-matrix
    gradient's two mirrored entries.
    """
    _flags(return_logdet=return_logdet, return_status=return_status, donate=donate)
    out, _ = _compiled(_potrs, (a,), (b,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A,
                       backend=backend, return_logdet=return_logdet, return_status=return_status)
    return out


def _potrs(a, b, *, T_A, mesh, matrix_specs, donate, backend, return_logdet, return_status):
    """potrs's outputs, and the factor state when donating (so that XLA can give it a's
    donated buffer; the caller drops it)."""
    factor = Cholesky(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    x, status = _status.solved(factor.status, factor.solve(b))
    logdet = _status.masked(status, factor.logdet()) if return_logdet else None
    out = pick((x, logdet, status), (True, return_logdet, return_status))
    return out, factor.state if donate else None


@shared_arguments
@checked
def cholesky(a: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False, donate=False,
             backend="auto"):
    """The lower-triangular Cholesky factor ``L`` with ``a = L @ L^H``.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian
        positive definite, only its lower triangle is read.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      return_status: also return the status (int32, replicated): 0 on success, else the order of
        the leading minor that is not positive definite (on the native backend counted in
        cuSOLVERMp's permuted order), or -1 for a non-finite result. Failed outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``L`` (N, N), zero above the diagonal, with a's sharding; then ``status`` when asked.
    """
    _flags(return_status=return_status)
    return _compiled(_cholesky, (a,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A,
                     backend=backend, return_status=return_status)


def _cholesky(a, *, T_A, mesh, matrix_specs, donate, backend, return_status):
    factor = Cholesky(a, T_A, mesh, matrix_specs, natural=True, donate=donate, backend=backend)
    return pick((factor.factor, factor.status), (True, return_status))


@shared_arguments
@checked
def lu_solve(a: SquareMatrix, b: Rhs, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False, donate=False,
             backend="auto"):
    """Solve ``a @ x = b`` for a general square ``a`` by LU factorisation with partial pivoting.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) in ``a`` and ``b``.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      b: the right-hand side, (N,) or (N, NRHS) with a's dtype, sharded ``P(r)``, ``P(r, None)``
        (r: a's row axes) or replicated.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      return_status: also return the status (int32, replicated): 0 on success, else the 1-based
        index of the first zero pivot (``a`` is singular), or -1 for a non-finite result. Failed
        outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``x`` with b's shape and sharding; then ``status`` when asked.
    """
    _flags(return_status=return_status)
    out, _ = _compiled(_lu_solve, (a,), (b,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A,
                       backend=backend, return_status=return_status)
    return out


def _lu_solve(a, b, *, T_A, mesh, matrix_specs, donate, backend, return_status):
    """lu_solve's outputs, and the factor when donating (so that XLA can give it a's donated
    buffer; the caller drops it)."""
    factor = LU(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick(_status.solved(factor.status, factor.solve(b)), (True, return_status)), factor.lu if donate else None


@shared_arguments
@checked
def least_squares(a: Matrix, b: TallRhs, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False,
                  donate=False, backend="auto"):
    """The ``x`` minimising ``||a @ x - b||_2`` for ``a`` of full column rank, by QR; for a wide
    ``a`` (M < N) of full row rank, the ``x`` of least norm with ``a @ x = b``.

    A wide ``a`` is factored through its conjugate transpose, ``a^H = Q R``, and
    ``x = Q R^-H b``.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) in ``a`` and ``b``.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      b: (M,) or (M, NRHS) with a's dtype, in any layout (``P(r)``, ``P(r, None)`` or replicated)
        on any grid shape: it is gathered whole on every process, so the ScaLAPACK-style
        restriction that every process-grid column owns a tile of ``b`` does not apply.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      return_status: also return the status (int32, replicated): 0 on success, else the 1-based
        index of the first zero diagonal entry of R (``a`` is rank deficient), or -1 for a
        non-finite result. Failed outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``x``, (N,) or (N, NRHS), laid out like ``b`` (its row axes must divide N); then
      ``status`` when asked.
    """
    _flags(return_status=return_status)
    return _compiled(_least_squares, (a,), (b,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A,
                     backend=backend, return_status=return_status)


def _least_squares(a, b, *, T_A, mesh, matrix_specs, donate, backend, return_status):
    factor = QR(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick(_status.solved(factor.status, factor.solve(b)), (True, return_status))


@shared_arguments
@checked
def qr(a: Matrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False, donate=False, backend="auto"):
    """The reduced QR decomposition ``a = q @ r``; for a wide ``a`` (M < N), ``q`` (M, M) and ``r``
    (M, N) upper trapezoidal (from the QR of a's first M columns and ``r[:, M:] = q^H a[:, M:]``).

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) for ``a`` of full rank.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      return_status: also return the status (int32, replicated): 0 on success, else the 1-based
        index of the first zero diagonal entry of R, or -1 for a non-finite result. Failed outputs
        are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``(q, r)``: with K = min(M, N), ``q`` (M, K) with orthonormal columns and ``r`` (K, N)
      upper triangular (trapezoidal), both with a's sharding; then ``status`` when asked.
    """
    _flags(return_status=return_status)
    return _compiled(_qr, (a,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A, backend=backend,
                     return_status=return_status)


def _qr(a, *, T_A, mesh, matrix_specs, donate, backend, return_status):
    if a.ndim == 2 and a.shape[0] < a.shape[1]:  # wide: a's first M columns, then q^H a
        return pick(wide_factors(a, T_A, mesh, matrix_specs, backend), (True, True, return_status))
    factor = QR(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.q, factor.r, factor.status), (True, True, return_status))


@shared_arguments
@checked
def syevd(a: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_eigenvectors=True, return_status=False,
          donate=False, backend="auto"):
    """Eigenvalues and eigenvectors of a Hermitian matrix: ``a @ v = v @ diag(w)``.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order); for degenerate eigenvalues the terms
    between equal eigenvalues are dropped (exact for losses invariant to rotations within an
    eigenspace, as in ``jnp.linalg.eigh``).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian,
        only its lower triangle is read.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      return_eigenvectors: return ``(w, v)`` (default) or ``w`` alone.
      return_status: also return the status (int32, replicated): 0 on success, or -1 for a
        non-finite result. Failed outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``(w, v)``: ``w`` (N,) ascending and replicated, ``v`` (N, N) with the eigenvectors as
      columns in a's sharding; or ``w`` alone; then ``status`` when asked.
    """
    _flags(return_eigenvectors=return_eigenvectors, return_status=return_status)
    return _compiled(_eigh, (a,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A, backend=backend,
                     return_eigenvectors=return_eigenvectors, return_status=return_status)


@shared_arguments
@checked
def sygvd(a: SquareMatrix, b: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_eigenvectors=True,
          return_status=False, donate=False, backend="auto"):
    """The generalised Hermitian eigenproblem ``a @ v = b @ v @ diag(w)`` with ``v^H b v = I``.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) in ``a`` and ``b`` (degenerate
    eigenvalues as in :func:`syevd`).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian,
        only its lower triangle is read.
      b: (N, N) Hermitian positive definite, with a's shape, dtype and layout; only its lower
        triangle is read.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: a's ``PartitionSpec`` (``P(r, c)``, ``P(r)`` or ``P(None, c)``), or a list
        with one spec per array argument (``[spec_a, spec_b]`` or one spec for both). Default:
        read from the arrays' shardings; with Auto mesh axes inside ``jax.jit``, the mesh axes in
        order.
      return_eigenvectors: return ``(w, v)`` (default) or ``w`` alone.
      return_status: also return the status (int32, replicated): 0 on success, else the order of
        b's leading minor that is not positive definite, or -1 for a non-finite result. Failed
        outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``(w, v)``: ``w`` (N,) ascending and replicated, ``v`` (N, N) in a's sharding; or ``w``
      alone; then ``status`` when asked.
    """
    _flags(return_eigenvectors=return_eigenvectors, return_status=return_status)
    return _compiled(_eigh, (a, b), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A, backend=backend,
                     return_eigenvectors=return_eigenvectors, return_status=return_status)


def _eigh(a, b=None, *, T_A, mesh, matrix_specs, donate, backend, return_eigenvectors, return_status):
    factor = Eigh(a, b, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.w, factor.v, factor.status), (True, return_eigenvectors, return_status))


@shared_arguments
@checked
def gesvd(a: Matrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, compute_u=True, compute_vh=True,
          full_matrices=False, return_status=False, donate=False, backend="auto"):
    """The singular value decomposition ``a = u @ diag(s) @ vh``, in NumPy's order.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) for distinct non-zero singular values.
    A wide ``a`` (M < N) is decomposed through its conjugate transpose at the tall cost.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      compute_u: return ``u`` (default True).
      compute_vh: return ``vh`` (default True).
      full_matrices: ``u`` is (M, M) and ``vh`` (N, N) instead of (M, K) and (K, N), K = min(M, N)
        (default False).
      return_status: also return the status (int32, replicated): 0 on success, or -1 for a
        non-finite result. Failed outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``(u, s, vh)``, ``(u, s)``, ``(s, vh)`` or ``s`` as asked: ``s`` (K,) descending and
      replicated, ``u`` and ``vh`` with a's sharding; then ``status`` when asked.
    """
    _flags(compute_u=compute_u, compute_vh=compute_vh, return_status=return_status)
    return _compiled(_gesvd, (a,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A, backend=backend,
                     compute_u=compute_u, compute_vh=compute_vh, full_matrices=full_matrices,
                     return_status=return_status)


def _gesvd(a, *, T_A, mesh, matrix_specs, donate, backend, compute_u, compute_vh, full_matrices, return_status):
    factor = SVD(a, T_A, mesh, matrix_specs, full_matrices=full_matrices, donate=donate, backend=backend)
    return pick((factor.u, factor.s, factor.vh, factor.status), (compute_u, True, compute_vh, return_status))


@shared_arguments
@checked
def polar(a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, compute_h=True, return_status=False,
          donate=False, backend="auto"):
    """The polar decomposition ``a = u_p @ h``.

    Works on float32, float64, complex64 and complex128, eagerly and inside ``jax.jit``.
    Differentiable (forward and reverse, any order) for ``a`` of full rank.

    Args:
      a: (M, N) matrix, M >= N, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: {matrix_specs}
      compute_h: also return ``h`` (default True).
      return_status: also return the status (int32, replicated): 0 on success, or -1 for a
        non-finite result. Failed outputs are NaN.
      donate: {donate}
      backend: {backend}

    Returns:
      ``(u_p, h)`` or ``u_p``: ``u_p`` (M, N) with orthonormal columns and ``h`` (N, N)
      Hermitian positive semi-definite, both with a's sharding; then ``status`` when asked.
    """
    _flags(compute_h=compute_h, return_status=return_status)
    return _compiled(_polar, (a,), mesh=mesh, matrix_specs=matrix_specs, donate=donate, T_A=T_A, backend=backend,
                     compute_h=compute_h, return_status=return_status)


def _polar(a, *, T_A, mesh, matrix_specs, donate, backend, compute_h, return_status):
    factor = Polar(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.u_p, factor.h, factor.status), (True, compute_h, return_status))
