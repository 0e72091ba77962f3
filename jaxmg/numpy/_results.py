"""JAX's own result types (named tuples), so that ``isinstance`` and attribute access match
what ``jax.numpy.linalg`` returns."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker reads the classes where the installed JAX defines them
    from jax._src.numpy.linalg import EighResult, QRResult, SlogdetResult, SVDResult
else:
    try:  # where JAX exports them
        from jax.numpy.linalg import EighResult, QRResult, SlogdetResult, SVDResult
    except ImportError:  # JAX 0.12 defines them in its implementation module only
        from jax._src.numpy.linalg import EighResult, QRResult, SlogdetResult, SVDResult

__all__ = ["EighResult", "QRResult", "SVDResult", "SlogdetResult"]
