"""``jaxmg.numpy``: JAX's NumPy linear algebra (:mod:`jaxmg.numpy.linalg`) on sharded matrices."""

from . import linalg

__all__ = ["linalg"]
