"""cholesky: the lower Cholesky factor of a Hermitian positive-definite matrix."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def cholesky(a, T_A=None, mesh=None, matrix_specs=None, *, return_status=False,
             donate=False, backend="auto"):
    """The lower-triangular ``L`` with ``a = L @ L^H``.

    Args:
      a: (N, N) Hermitian positive-definite matrix, sharded like ``potrs``'s ``a``; only
        its lower triangle is read.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      return_status: also return the status (0, or the order of the failing minor).

    Returns:
      ``L`` (N, N) with a's sharding, zero above the diagonal; then ``status`` when asked.
    """
    call, args = setup("cholesky", matrices=[("a", a)], T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(return_status=return_status))
    factor, status = call.run(args, [call.block(), Replicated()], [args[0].shape, ()],
                              ["L", "status"])
    return pick((factor, status), (True, return_status))
