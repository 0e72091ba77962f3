"""One device's foreign calls, below both backends: loading jaxmg's native library and registering
its handlers (``_library``), the codes it shares with Python (``_codes``), the in-place relayout
(``relayout``) and cuBLAS products and inverses (``gemm``) on one NVIDIA GPU, the device solver's
factorisations (``solver``: LAPACK, cuSOLVER or hipSOLVER, else JAX's own) and the rule that
splits a per-matrix call over a stack (``per_matrix``). ``jaxmg.kernels.local`` and
``jaxmg.kernels.native`` both build on these; neither imports the other."""
