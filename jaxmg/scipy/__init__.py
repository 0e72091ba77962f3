"""``jaxmg.scipy``: JAX's SciPy linear algebra (:mod:`jaxmg.scipy.linalg`) on sharded matrices."""

from . import linalg

__all__ = ["linalg"]
