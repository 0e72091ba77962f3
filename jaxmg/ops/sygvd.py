"""sygvd: the generalised Hermitian-definite eigenproblem A v = lambda B v."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def sygvd(a, b, T_A=None, mesh=None, matrix_specs=None, *, return_eigenvectors=True,
          return_status=False, donate=False, backend="auto"):
    """Solve ``a @ v = w * (b @ v)`` for Hermitian ``a`` and Hermitian positive-definite ``b``.

    Args:
      a, b: (N, N) matrices with one layout, ``P(r, c)``, ``P(r)`` or ``P(None, c)``; only
        their lower triangles are read.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      return_eigenvectors: return ``(w, v)``; with False only ``w``.
      return_status: also return the status: 0, the order of the failing minor of ``b``,
        or -1 for a non-finite result.

    Returns:
      ``w`` (N,) ascending, replicated; ``v`` (N, N) with a's sharding, normalised so that
      ``v^H b v = I``; then ``status`` when asked.
    """
    call, args = setup("sygvd", matrices=[("a", a), ("b", b)], T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(return_eigenvectors=return_eigenvectors,
                                  return_status=return_status))
    n = args[0].shape[0]
    w, v, status = call.run(args, [Replicated(), call.block(), Replicated()],
                            [(n,), (n, n), ()], ["w", "v", "status"])
    return pick((w, v, status), (True, return_eigenvectors, return_status))
