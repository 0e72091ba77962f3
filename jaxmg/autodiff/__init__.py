"""Derivative rules, written with the sharded operations of ``jaxmg.ops`` so that they work
unchanged on every backend.

* :mod:`.solves` — linear solves with a saved factor (Cholesky, LU): forward and reverse
  mode, any order, through ``jax.lax.custom_linear_solve``; the backward pass is one more
  solve with the same factor.
* :mod:`.logdet` — log-determinant from a Cholesky factor (custom JVP).
* :mod:`.decompositions` — custom JVPs of the factorisations whose outputs are matrices
  (Cholesky's L, QR, eigen-, singular value and polar decompositions) and of least squares;
  reverse mode is JAX's transposition of each, so every order is available.
* :mod:`.tangents` — the JVP formulas of those decompositions (distributed products only).
"""
