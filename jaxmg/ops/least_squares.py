"""least_squares: minimise ||A x - b||_2 for a tall or square A of full column rank."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def least_squares(a, b, T_A=None, mesh=None, matrix_specs=None, *, return_status=False,
                  donate=False, backend="auto"):
    """The ``x`` that minimises ``||a @ x - b||_2``, for (M, N) ``a`` with M >= N.

    Args:
      a: (M, N) matrix of full column rank, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``.
      b: (M,) or (M, NRHS), sharded ``P(r)``, ``P(r, None)`` or replicated. Any grid shape
        works with any of these layouts: the right-hand side is gathered whole on every
        process, so no process-grid column needs to own a tile of it (the one-column-grid
        restriction of ScaLAPACK-style drivers does not apply).
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      return_status: also return the status: 0, or the 1-based index of the first zero
        diagonal entry of R (``a`` is rank deficient).

    Returns:
      ``x`` of shape (N,) or (N, NRHS), laid out like ``b`` (its row axes must divide N);
      then ``status`` when asked.
    """
    call, args = setup("least_squares", matrices=[("a", a)], rhs=[("b", b)], square=False,
                       T_A=T_A, mesh=mesh, matrix_specs=matrix_specs, donate=donate,
                       backend=backend, flags=dict(return_status=return_status))
    n = args[0].shape[1]
    x, status = call.run(args, [call.rows(), Replicated()], [(n,) + args[1].shape[1:], ()],
                         ["x", "status"])
    return pick((x, status), (True, return_status))
