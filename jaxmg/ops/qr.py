"""qr: the reduced QR factorisation of a tall or square matrix."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def qr(a, T_A=None, mesh=None, matrix_specs=None, *, return_status=False, donate=False,
       backend="auto"):
    """Reduced ``a = q @ r`` for (M, N) ``a`` with M >= N.

    Args:
      a: (M, N) matrix, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      return_status: also return the status (0, or -1 for a non-finite result).

    Returns:
      ``(q, r)``: ``q`` (M, N) with orthonormal columns and ``r`` (N, N) upper triangular,
      both with a's sharding; then ``status`` when asked.
    """
    call, args = setup("qr", matrices=[("a", a)], square=False, T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(return_status=return_status))
    m, n = args[0].shape
    q, r, status = call.run(args, [call.block(), call.block(), Replicated()],
                            [(m, n), (n, n), ()], ["q", "r", "status"])
    return pick((q, r, status), (True, True, return_status))
