"""syevd: eigenvalues and eigenvectors of a Hermitian matrix."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def syevd(a, T_A=None, mesh=None, matrix_specs=None, *, return_eigenvectors=True,
          return_status=False, donate=False, backend="auto"):
    """Eigen-decomposition ``a = v @ diag(w) @ v^H`` of Hermitian ``a``.

    Args:
      a: (N, N) Hermitian matrix, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``; only its
        lower triangle is read.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      return_eigenvectors: return ``(w, v)``; with False only ``w``.
      return_status: also return the status (0, or -1 for a non-finite result).

    Returns:
      ``w`` (N,) real eigenvalues in ascending order, replicated; ``v`` (N, N) with the
      eigenvectors as columns, with a's sharding; then ``status`` when asked.
    """
    call, args = setup("syevd", matrices=[("a", a)], T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(return_eigenvectors=return_eigenvectors,
                                  return_status=return_status))
    n = args[0].shape[0]
    w, v, status = call.run(args, [Replicated(), call.block(), Replicated()],
                            [(n,), (n, n), ()], ["w", "v", "status"])
    return pick((w, v, status), (True, return_eigenvectors, return_status))
