"""The per-shard layer, for use inside your own ``jax.shard_map`` over the process grid
(:mod:`jaxmg.ops.local`)."""

from . import local

__all__ = ["local"]
