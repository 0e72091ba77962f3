"""The sharded operations: one module per operation family.

Each function takes a :class:`jaxmg._call.Call` (the checked layout and backend) and
global arrays, builds the ``shard_map`` over the mesh and calls the per-shard kernel of
the chosen backend (``jaxmg.kernels``). The public solvers and modules are built from
these, and the derivative rules (``jaxmg.autodiff``) too. :mod:`jaxmg.ops.local` is the
per-shard layer for use inside your own ``jax.shard_map``.
"""

from . import cholesky, eigh, local, lu, polar, products, qr, svd

__all__ = ["cholesky", "eigh", "local", "lu", "polar", "products", "qr", "svd"]
