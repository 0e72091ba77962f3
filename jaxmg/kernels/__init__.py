"""Per-shard kernels, one module per backend: ``portable`` (pure JAX) and ``native`` (cuSOLVERMp)."""
