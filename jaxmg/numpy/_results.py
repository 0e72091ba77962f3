"""JAX's own result types (named tuples), so that ``isinstance`` and attribute access match
what ``jax.numpy.linalg`` returns."""

try:  # where JAX exports them
    from jax.numpy.linalg import EighResult, QRResult, SlogdetResult, SVDResult  # type: ignore[attr-defined]
except ImportError:  # JAX 0.12 defines them in its implementation module only
    from jax._src.numpy.linalg import EighResult, QRResult, SlogdetResult, SVDResult

__all__ = ["EighResult", "QRResult", "SVDResult", "SlogdetResult"]
