"""polar: the polar decomposition A = U_p H."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def polar(a, T_A=None, mesh=None, matrix_specs=None, *, compute_h=True, return_status=False,
          donate=False, backend="auto"):
    """``a = u_p @ h`` for (M, N) ``a`` with M >= N.

    Args:
      a: (M, N) matrix, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      compute_h: also return ``h``.
      return_status: also return the status (0, or -1 for a non-finite result).

    Returns:
      ``u_p`` (M, N) with orthonormal columns and ``h`` (N, N) Hermitian positive
      semi-definite, both with a's sharding; ``u_p`` alone when ``compute_h=False``.
      Then ``status`` when asked.
    """
    call, args = setup("polar", matrices=[("a", a)], square=False, T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(compute_h=compute_h, return_status=return_status))
    m, n = args[0].shape
    u_p, h, status = call.run(args, [call.block(), call.block(), Replicated()],
                              [(m, n), (n, n), ()], ["u_p", "h", "status"])
    return pick((u_p, h, status), (True, compute_h, return_status))
