"""potrs: solve A x = b for Hermitian positive-definite A, optionally with log det A."""

from __future__ import annotations

from ._common import Replicated, pick, setup


def potrs(a, b, T_A=None, mesh=None, matrix_specs=None, *, return_logdet=False,
          return_status=False, donate=False, backend="auto"):
    """Solve ``a @ x = b`` for Hermitian positive-definite ``a`` by Cholesky.

    Args:
      a: (N, N) matrix, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)``. Only its lower
        triangle is read.
      b: (N,) vector or (N, NRHS) matrix, sharded ``P(r)``, ``P(r, None)`` or replicated.
      T_A: tile size of the block-cyclic layout; None chooses it (see ``jaxmg.auto_tile``).
      mesh: the device mesh; default a's mesh, else the context mesh.
      matrix_specs: a's PartitionSpec, or ``[spec_a, spec_b]``; default from the arrays.
      return_logdet: also return ``log det a`` (real, replicated).
      return_status: also return the status (int32, replicated): 0 on success, else the
        order of the leading minor that is not positive definite; outputs are then NaN.
      donate: let the call consume ``a`` and ``b``.
      backend: ``"auto"``, ``"portable"`` or ``"native"``.

    Returns:
      ``x`` with b's shape and sharding; then ``logdet`` and ``status`` when asked.
    """
    call, args = setup("potrs", matrices=[("a", a)], rhs=[("b", b)], T_A=T_A, mesh=mesh,
                       matrix_specs=matrix_specs, donate=donate, backend=backend,
                       flags=dict(return_logdet=return_logdet, return_status=return_status))
    x, logdet, status = call.run(args, [call.rows(), Replicated(), Replicated()],
                                 [args[1].shape, (), ()], ["x", "logdet", "status"])
    return pick((x, logdet, status), (True, return_logdet, return_status))
