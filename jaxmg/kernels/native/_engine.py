"""Guards for the loaded cuSOLVERMp's known defects, by its version.

cuSOLVERMp's divide-and-conquer tridiagonal eigensolver (STEDC), which its syevd and sygvd run,
has a defect in versions 0.4.2 to 0.8.x with tile sizes (block sizes) that are not powers of two
and on some 2-D process grids: syevd and sygvd may fail or hang (NVIDIA's own sygvd sample hangs
on a 4 x 4 grid with tile 10). 0.9.0 fixed it, and 0.9.1 fixed eigenvectors of syevd and gesvd
that were silently wrong, and failures on large problems. NVIDIA does not say which 2-D grids
are affected, so on a version below :data:`FIXED` the native eigensolvers (syevd, sygvd, and so
``eigh``, ``eigvalsh``, ``svd``/``gesvd`` and the modules ``Eigh`` and ``SVD``, which reach them)

* refuse an explicit ``T_A`` that is not a power of two, naming it and the nearest powers of two
  (the automatic ``T_A`` is always a power of two);
* take sygvd's tile (a divisor of the local extents, no padding) among powers of two only;
* refuse process grids with more than one process row and more than one process column (any
  2-D grid, square or not), naming the fix: a one-axis layout (``pr x 1`` or ``1 x pc``),
  ``backend="portable"``, or cuSOLVERMp 0.9.1 or newer.

With 0.9.1 or newer nothing is refused. A version that cannot be read is treated as affected.
jaxmg's polar decomposition runs QDWH (QR and Cholesky) on every version, never STEDC, so it is
not guarded. :func:`refusal` is the rule as a pure function of (version, T_A, grid);
:func:`guards` describes the guards in force for ``python -m jaxmg.info``.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Optional

from ..ffi import _library

#: The first cuSOLVERMp version without the STEDC defect and the wrong eigenvectors.
FIXED: tuple = (0, 9, 1)

#: The handlers that run cuSOLVERMp's STEDC.
STEDC_OPS: tuple = ("syevd", "sygvd")

_cache: dict = {}


def version_of(code: int) -> Optional[tuple]:
    """(major, minor, patch) of a version code ``major * 1000 + minor * 100 + patch`` (the
    header's ``CUSOLVERMP_VERSION``, which ``cusolverMpGetVersion`` returns), or None where the
    code is negative (not read)."""
    if code is None or code < 0:
        return None
    return (code // 1000, (code % 1000) // 100, code % 100)


def text(version: Optional[tuple]) -> str:
    """``"0.8.0"``, or ``"of unknown version"``."""
    return ".".join(map(str, version)) if version is not None else "of unknown version"


def _wheel_version(path: str) -> Optional[tuple]:
    """The version of the nvidia-cusolvermp wheel that holds the loaded library ``path``."""
    for name in ("nvidia-cusolvermp-cu13", "nvidia-cusolvermp-cu12"):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for sub in ("cu13", "cu12", "cusolvermp"):
            where = os.path.realpath(str(dist.locate_file(f"nvidia/{sub}/lib/libcusolverMp.so.0")))
            if path and os.path.realpath(path) == where:
                parts = dist.version.split(".")[:3]
                return tuple(int(p) for p in parts if p.isdigit())
    return None


def _device_ordinal() -> int:
    """The CUDA ordinal of this process's first GPU, or -1."""
    import jax

    devices = [d for d in jax.local_devices() if d.platform in ("gpu", "cuda")]
    return int(devices[0].local_hardware_id) if devices else -1


def engine_version() -> Optional[tuple]:
    """The loaded cuSOLVERMp's version as (major, minor, patch), or None where it is not loaded
    or cannot be read. Read once: from the library itself (its first handle, or a handle made
    for the question on this process's GPU), else from the wheel that holds the loaded file."""
    if "version" in _cache:
        return _cache["version"]
    if _library.unavailable_reason() is not None:
        return None
    native = _library._native_module()
    found = version_of(native.cusolvermp_version())
    if found is None:
        found = version_of(native.probe_cusolvermp_version(_device_ordinal()))
    if found is None:
        found = _wheel_version(native.library_paths().get("cusolvermp", ""))
    if found is not None:
        _cache["version"] = found
    return found


def affected(version: Optional[tuple]) -> bool:
    """Whether ``version`` (None: not read) has the STEDC defect or the wrong eigenvectors."""
    return version is None or tuple(version) < FIXED


def power_of_two(t: int) -> bool:
    return t >= 1 and t & (t - 1) == 0


def _nearest_powers(t: int) -> str:
    below = 1 << (int(t).bit_length() - 1)
    return f"{below} or {below * 2}" if below != t else str(t)


def refusal(version: Optional[tuple], tile: int, nprow: int, npcol: int, op: str = "syevd") -> Optional[str]:
    """Why cuSOLVERMp ``version`` may not run ``op`` (syevd or sygvd) with tile ``tile`` (the
    caller's ``T_A``) on an ``nprow x npcol`` process grid; None when it may."""
    if op not in STEDC_OPS or not affected(version):
        return None
    problems, fixes = [], []
    if not power_of_two(int(tile)):
        problems.append(f"T_A={tile} is not a power of two")
        fixes.append(f"pass T_A=None (automatic) or a power of two such as {_nearest_powers(int(tile))}")
    if nprow > 1 and npcol > 1:
        problems.append(f"the process grid is {nprow} x {npcol} (2-D)")
        fixes.append(
            "lay a over one mesh axis (a pr x 1 or 1 x pc grid: a one-axis mesh, or matrix_specs "
            "such as P('x', None)), or pass backend='portable'"
        )
    if not problems:
        return None
    loaded = (
        f"the loaded cuSOLVERMp is {text(version)}"
        if version is not None
        else "the loaded cuSOLVERMp's version could not be read (taken as below 0.9.1)"
    )
    return (
        f"jaxmg {op}: {loaded}. cuSOLVERMp below {text(FIXED)} has a defect in its divide-and-conquer "
        f"eigensolver (STEDC) with tile sizes that are not powers of two and on 2-D process grids, under "
        f"which syevd and sygvd may fail or hang, and computes wrong eigenvectors in cases that 0.9.1 fixed; "
        f"here {' and '.join(problems)}. To fix: {'; '.join(fixes)}; or install "
        f"cuSOLVERMp {text(FIXED)} or newer (pip install 'nvidia-cusolvermp-cu13>=0.9.1' with the NCCL it "
        f"needs)."
    )


def check(op: str, tile: int, grid) -> None:
    """ValueError where the loaded cuSOLVERMp may not run ``op`` with ``tile`` on ``grid``."""
    reason = refusal(engine_version(), int(tile), grid.nprow, grid.npcol, op)
    if reason is not None:
        raise ValueError(reason)


def powers_of_two_only() -> bool:
    """Whether STEDC's tiles must be powers of two (the loaded version is affected)."""
    return affected(engine_version())


def guards(version: Optional[tuple]) -> list:
    """The guards in force with ``version``, as sentences (empty with a fixed version)."""
    if not affected(version):
        return []
    return [
        f"syevd/sygvd (eigh, eigvalsh, svd, Eigh, SVD): T_A must be a power of two (below {text(FIXED)})",
        f"syevd/sygvd: 2-D process grids are refused (below {text(FIXED)})",
    ]


def info() -> dict:
    """Versions, library paths and capabilities of the native backend (for bug reports)."""
    reason = _library.unavailable_reason()
    out = {"available": reason is None, "reason": reason}
    if reason is None or "could not be loaded" in (reason or ""):
        native = _library._native_module()
        if reason is None:
            version = engine_version()
            out.update(
                engine=f"cuSOLVERMp {text(version)}",
                engine_guards="; ".join(guards(version)) or "none (nothing is refused)",
            )
        out.update(
            header_versions=native.header_versions(),
            cuda_runtime=native.cuda_runtime_version(),
            nccl_version=native.nccl_version(),
            cusolvermp_version=native.cusolvermp_version(),
            libraries=native.library_paths(),
            capabilities=native.capabilities(),
            cache=native.cache_info(),
            watchdog={"timeout_s": native.native_timeout(), "aborts": native.aborts()},
        )
    try:
        out["cusolvermp_wheel"] = importlib.metadata.version("nvidia-cusolvermp-cu13")
    except Exception:  # noqa: BLE001
        out["cusolvermp_wheel"] = None
    return out
