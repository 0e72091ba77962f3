"""The functional API: each solver is one of the factorisation modules, used once.

``potrs(a, b)`` is ``Cholesky(a).solve(b)``, ``lu_solve`` is ``LU(a).solve(b)``, and so
on: one implementation, the same derivatives. Shapes, layouts and keywords are those
users of distributed JAX solvers already write (see the README's table).
"""

from __future__ import annotations

import functools

import jax
from jax.sharding import NamedSharding

from ._call import pick
from ._checks import check_flag
from ._typing import MeshLike, Rhs, Specs, SquareMatrix, TallMatrix, TallRhs, Tile, checked
from .modules import LU, QR, SVD, Cholesky, Eigh, Polar


def _flags(**flags) -> None:
    for name, value in flags.items():
        check_flag(value, name)


def _one_mesh(mesh, *xs):
    """The mesh of an eager call that one compiled call can take: every x a concrete
    jax.Array laid out on the same mesh (``mesh``, where given); else None."""
    meshes = set()
    for x in xs:
        if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
            return None
        sharding = getattr(x, "sharding", None)
        if not isinstance(sharding, NamedSharding):
            return None
        meshes.add(sharding.mesh)
    if len(meshes) != 1 or (mesh is not None and mesh not in meshes):
        return None
    return meshes.pop()


def _hashable(*args) -> bool:
    try:
        hash(args)
    except TypeError:  # e.g. malformed matrix_specs: the module's checks explain
        return False
    return True


@functools.lru_cache(maxsize=64)
def _potrs_once(T_A, mesh, matrix_specs, return_logdet, donate, backend):
    """An eager potrs as one compiled call: the factorisation and the solve of the module
    traced together (one dispatch, not one per step). With ``donate`` the factor state is
    returned too (and dropped by the caller), so that XLA can give it a's donated buffer."""
    def run(a, b):
        factor = Cholesky(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
        logdet = factor.logdet() if return_logdet else None
        return factor.solve(b), logdet, factor.status, factor.state if donate else None
    return jax.jit(run, donate_argnums=(0,) if donate else ())


@checked
def potrs(a: SquareMatrix, b: Rhs, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_logdet=False,
          return_status=False, donate=False, backend="auto"):
    """Solve ``a @ x = b`` for Hermitian positive-definite ``a`` by Cholesky.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``; only its lower triangle
        is read.
      b: (N,) or (N, NRHS), sharded ``P(r)``, ``P(r, None)`` or replicated.
      T_A: tile size of the native block-cyclic layout; None picks it (README, rule 8).
      mesh: the device mesh; default a's mesh, else the context mesh.
      matrix_specs: a's PartitionSpec, or ``[spec_a, spec_b]``; default from the arrays.
      return_logdet: also return ``log det a`` (real, replicated).
      return_status: also return the status (int32, replicated): 0, or the order of the
        leading minor that is not positive definite; outputs are then NaN.
      donate: let the call consume ``a`` (default False: inputs are kept).
      backend: ``"auto"``, ``"portable"`` or ``"native"``.

    Returns:
      ``x`` with b's shape and sharding; then ``logdet`` and ``status`` when asked.
    """
    _flags(return_logdet=return_logdet, return_status=return_status, donate=donate)
    specs = tuple(matrix_specs) if isinstance(matrix_specs, list) else matrix_specs
    own = _one_mesh(mesh, a, b)
    if own is not None and _hashable(T_A, specs, backend):
        with jax.set_mesh(own):  # the arrays' own mesh, whatever the caller's context
            x, logdet, status, _ = _potrs_once(T_A, own, specs, return_logdet, donate, backend)(a, b)
        return pick((x, logdet, status), (True, return_logdet, return_status))
    factor = Cholesky(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    x = factor.solve(b)
    logdet = factor.logdet() if return_logdet else None
    return pick((x, logdet, factor.status), (True, return_logdet, return_status))


@checked
def cholesky(a: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False, donate=False,
             backend="auto"):
    """The lower-triangular ``L`` with ``a = L @ L^H`` (N x N, a's sharding); then ``status``."""
    _flags(return_status=return_status)
    factor = Cholesky(a, T_A, mesh, matrix_specs, natural=True, donate=donate, backend=backend)
    return pick((factor.factor, factor.status), (True, return_status))


@checked
def lu_solve(a: SquareMatrix, b: Rhs, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False, donate=False,
             backend="auto"):
    """Solve ``a @ x = b`` for a general square ``a`` by LU with partial pivoting.

    ``x`` has b's shape and sharding; ``status`` is 0, or the 1-based index of the first zero
    pivot (``a`` singular, ``x`` not finite). Other arguments as in :func:`potrs`.
    """
    _flags(return_status=return_status)
    factor = LU(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.solve(b), factor.status), (True, return_status))


@checked
def least_squares(a: TallMatrix, b: TallRhs, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False,
                  donate=False, backend="auto"):
    """The ``x`` minimising ``||a @ x - b||_2`` for (M, N) ``a`` of full column rank, M >= N.

    ``b`` is (M,) or (M, NRHS) in any layout (``P(r)``, ``P(r, None)`` or replicated) on any
    grid shape: it is gathered whole on every process, so the ScaLAPACK-style restriction
    that every process-grid column owns a tile of ``b`` does not apply. ``x`` (N or N x NRHS)
    is laid out like ``b`` (its row axes must divide N). ``status``: 0, or the index of the
    first zero diagonal entry of R.
    """
    _flags(return_status=return_status)
    factor = QR(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.solve(b), factor.status), (True, return_status))


@checked
def qr(a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_status=False, donate=False, backend="auto"):
    """Reduced ``a = q @ r`` for (M, N) ``a``, M >= N: ``(q, r)`` in a's sharding; then ``status``."""
    _flags(return_status=return_status)
    factor = QR(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.q, factor.r, factor.status), (True, True, return_status))


@checked
def syevd(a: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_eigenvectors=True, return_status=False,
          donate=False, backend="auto"):
    """Eigenvalues ``w`` (ascending, replicated) and eigenvectors ``v`` (a's sharding) of Hermitian
    ``a``: ``(w, v)``, or ``w`` alone with ``return_eigenvectors=False``; then ``status``."""
    _flags(return_eigenvectors=return_eigenvectors, return_status=return_status)
    factor = Eigh(a, None, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.w, factor.v, factor.status), (True, return_eigenvectors, return_status))


@checked
def sygvd(a: SquareMatrix, b: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, return_eigenvectors=True,
          return_status=False, donate=False, backend="auto"):
    """``a @ v = w * (b @ v)`` for Hermitian ``a`` and Hermitian positive-definite ``b`` (one
    layout): ``(w, v)`` with ``v^H b v = I``, or ``w``; then ``status``."""
    _flags(return_eigenvectors=return_eigenvectors, return_status=return_status)
    factor = Eigh(a, b, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.w, factor.v, factor.status), (True, return_eigenvectors, return_status))


@checked
def gesvd(a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, compute_u=True, compute_vh=True,
          full_matrices=False, return_status=False, donate=False, backend="auto"):
    """``a = u @ diag(s) @ vh`` for (M, N) ``a``, M >= N, in NumPy order: ``(u, s, vh)``,
    ``(u, s)``, ``(s, vh)`` or ``s``; ``s`` descending and replicated, ``u`` (M x N, or M x M
    with ``full_matrices``) and ``vh`` (N x N) in a's sharding. Then ``status``."""
    _flags(compute_u=compute_u, compute_vh=compute_vh, return_status=return_status)
    factor = SVD(a, T_A, mesh, matrix_specs, full_matrices=full_matrices, donate=donate, backend=backend)
    return pick((factor.u, factor.s, factor.vh, factor.status), (compute_u, True, compute_vh, return_status))


@checked
def polar(a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *, compute_h=True, return_status=False,
          donate=False, backend="auto"):
    """``a = u_p @ h`` for (M, N) ``a``, M >= N: ``(u_p, h)`` or ``u_p`` (a's sharding); then
    ``status``."""
    _flags(compute_h=compute_h, return_status=return_status)
    factor = Polar(a, T_A, mesh, matrix_specs, donate=donate, backend=backend)
    return pick((factor.u_p, factor.h, factor.status), (True, compute_h, return_status))
