"""lu_solve: solve a general square system A x = b by LU with partial pivoting."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def lu_solve(a, b, T_A=None, mesh=None, matrix_specs=None, *, return_status=False,
             donate=False, backend="auto"):
    """Solve ``a @ x = b`` for a general square ``a``.

    Args:
      a: (N, N) matrix, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``.
      b: (N,) or (N, NRHS), sharded ``P(r)``, ``P(r, None)`` or replicated.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      return_status: also return the status: 0, or the 1-based index of the first
        zero pivot (``a`` is singular; ``x`` is then not finite).

    Returns:
      ``x`` with b's shape and sharding; then ``status`` when asked.
    """
    call, args = setup("lu_solve", matrices=[("a", a)], rhs=[("b", b)], T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(return_status=return_status))
    x, status = call.run(args, [call.rows(), Replicated()], [args[1].shape, ()], ["x", "status"])
    return pick((x, status), (True, return_status))
