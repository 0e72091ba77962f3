"""gesvd: the singular value decomposition."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def gesvd(a, T_A=None, mesh=None, matrix_specs=None, *, compute_u=True, compute_vh=True,
          full_matrices=False, return_status=False, donate=False, backend="auto"):
    """``a = u @ diag(s) @ vh`` for (M, N) ``a`` with M >= N.

    Args:
      a: (M, N) matrix, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``.
      T_A, mesh, matrix_specs, donate, backend: as in :func:`jaxmg.potrs`.
      compute_u, compute_vh: which singular vectors to return.
      full_matrices: ``u`` is (M, M) instead of (M, N).
      return_status: also return the status (0, or -1 for a non-finite result).

    Returns:
      In NumPy order, ``(u, s, vh)``, ``(u, s)``, ``(s, vh)`` or ``s``: ``s`` (N,) real and
      descending, replicated; ``u`` and ``vh`` (N, N) with a's sharding. Then ``status``.
    """
    call, args = setup("gesvd", matrices=[("a", a)], square=False, T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(compute_u=compute_u, compute_vh=compute_vh,
                                  full_matrices=full_matrices, return_status=return_status))
    m, n = args[0].shape
    u, s, vh, status = call.run(
        args, [call.block(), Replicated(), call.block(), Replicated()],
        [(m, m if full_matrices else n), (n,), (n, n), ()], ["u", "s", "vh", "status"],
        full_matrices=bool(full_matrices))
    return pick((u, s, vh, status), (compute_u, True, compute_vh, return_status))
