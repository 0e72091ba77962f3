"""The kernels: ``local`` (a device's own solver on whole matrices) and ``native`` (cuSOLVERMp over
the process grid), both implementing the family protocols of ``families``."""
