"""``python -m jaxmg.info``: what jaxmg runs on here, for bug reports and install checks.

Prints the versions of jaxmg and the packages it uses, whether NVIDIA GPUs and the native
module are present (with the loaded cuSOLVERMp/NCCL libraries, or why they did not load,
and how to fix it), the JAX devices, and the route (and backend) that ``backend="auto"`` gives
each operation for one matrix and for a stack of matrices of order ``--n`` (default 4,096) and
dtype ``--dtype`` on a mesh of all devices. ``--json`` prints the same as one JSON object.

:func:`jaxmg.route` and :func:`jaxmg.default_backend` answer the same question in Python; they
read the decision that every call takes (``jaxmg._routes.choose``). The package does not import
this module (it runs as ``__main__``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata

#: Distributions whose versions are reported (absent ones are reported as None).
PACKAGES = (
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "jax-cuda12-plugin",
    "numpy",
    "equinox",
    "jaxtyping",
    "beartype",
    "lineax",
    "nvidia-cusolvermp-cu13",
    "nvidia-cusolvermp-cu12",
    "nvidia-nccl-cu13",
    "nvidia-nccl-cu12",
    "nvidia-cusolver",
    "nvidia-cublas",
)

#: The public operations, in the order reported.
OPERATIONS = ("potrs", "cholesky", "lu_solve", "least_squares", "qr", "syevd", "sygvd", "gesvd", "polar")


#: What the report says on a machine without NVIDIA GPUs, where the native backend never runs.
NO_GPU_NOTE = (
    "no NVIDIA GPU here: the portable backend is in use, and nothing is wrong "
    "(the native cuSOLVERMp backend runs only on NVIDIA GPUs)"
)


def _version(name: str):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def report(n: int = 4096, dtype: str = "float64") -> dict:
    """Everything ``python -m jaxmg.info`` prints, as a dict of plain values."""
    import jax
    from jax.sharding import AxisType

    import jaxmg

    from . import _native_check, _nvidia, _routes
    from .kernels import native, qdwh, two_stage

    out = {
        "jaxmg": {"version": jaxmg.__version__, "path": jaxmg.__path__[0]},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "nvidia_gpu": {"present": _nvidia.has_nvidia_gpu(), "driver": _nvidia.driver_version()},
    }
    native_info = native.info()
    reason = native_info.get("reason")
    if not out["nvidia_gpu"]["present"]:
        # the native backend is for NVIDIA GPUs only: without them there is nothing to fix
        native_info["note"] = NO_GPU_NOTE
    elif reason is not None:
        native_info["fix"] = _native_check.fix_for(reason)
    out["native"] = native_info
    devices = jax.devices()
    out["devices"] = {
        "platform": devices[0].platform,
        "count": len(devices),
        "local": jax.local_device_count(),
        "processes": jax.process_count(),
        "kinds": sorted({d.device_kind for d in devices}),
    }
    mesh = jax.make_mesh((len(devices),), ("i",), axis_types=(AxisType.Auto,))
    shape = (n, n)
    out["routes"] = {"n": n, "dtype": dtype, "mesh": dict(mesh.shape)}
    out["backends"] = {
        op: {
            "route": _routes.route(op, shape, dtype, mesh),
            "stacked": _routes.route(op, shape, dtype, mesh, stacked=len(devices)),
            "auto": _routes.default_backend(op, mesh, shape, dtype),
            "why_not_native": _routes.native_unavailable(_routes.family(op), mesh),
        }
        for op in OPERATIONS
    }
    kind = devices[0].platform
    out["local_svd"] = {
        "platform": kind,
        "polar_eigh_above": qdwh.polar_eigh_above(kind),
        "polar_eigh": qdwh.polar_eigh(kind, shape),
    }
    out["local_eigh"] = {
        "platform": kind,
        "two_stage_above": two_stage.two_stage_above(kind),
        "two_stage_band": two_stage.two_stage_band(kind, shape),
    }
    return out


def format_report(info: dict) -> str:
    """``report()`` as the text that ``python -m jaxmg.info`` prints."""
    lines = [
        f"jaxmg {info['jaxmg']['version']} ({info['jaxmg']['path']})",
        f"python {info['python']} on {info['platform']}",
        "",
        "packages:",
    ]
    lines += [f"  {name:24s} {version or '-'}" for name, version in info["packages"].items()]
    gpu = info["nvidia_gpu"]
    gpus = "yes, driver " + (gpu["driver"] or "version unknown") if gpu["present"] else "none found"
    lines += ["", f"NVIDIA GPUs: {gpus}"]
    native = info["native"]
    state = "available" if native["available"] else ("not used" if native.get("note") else "unavailable")
    lines.append(f"native backend: {state}")
    if native.get("note"):
        lines.append(f"  {native['note']}")
    elif native.get("reason"):
        lines.append(f"  why: {native['reason']}")
    if native.get("fix"):
        lines.append(f"  fix: {native['fix']}")
    for key, value in native.items():
        if key not in ("available", "reason", "fix", "note") and not (native.get("note") and value is None):
            lines.append(f"  {key}: {value}")
    d = info["devices"]
    lines += [
        "",
        f"devices: {d['count']} x {d['platform']} ({', '.join(d['kinds'])}), "
        f"{d['local']} local, {d['processes']} process(es)",
        "",
        f"backend='auto' gives, for a {info['routes']['dtype']} matrix of order {info['routes']['n']} on a "
        f"mesh of all devices (route, route of a stack under jax.vmap, backend):",
    ]
    for op, choice in info["backends"].items():
        why = ""
        if choice["auto"] != "native":
            why = f"  ({choice['why_not_native'] or 'one device measured faster while it fits: jaxmg/_routes.py'})"
        lines.append(f"  {op:14s} {choice['route']:11s} {choice['stacked']:11s} {choice['auto']}{why}")
    svd = info.get("local_svd")
    if svd:
        above = svd["polar_eigh_above"]
        method = (
            "the platform's own SVD at every order"
            if above is None
            else f"QDWH polar + eigh above order {above}, the platform's own SVD up to it"
        )
        lines.append(
            f"svd and polar on the local and batch routes ({svd['platform']}): {method} "
            f"(jaxmg/kernels/qdwh.py POLAR_EIGH_ABOVE)"
        )
    eigh = info.get("local_eigh")
    if eigh:
        lines.append(
            f"Hermitian eigensolver on the local and batch routes ({eigh['platform']}): "
            f"{_eigh_method(eigh['two_stage_above'])} (jaxmg/kernels/two_stage.py TWO_STAGE_ABOVE)"
        )
    return "\n".join(lines)


def _eigh_method(above) -> str:
    if above is None:
        return "the platform's own syevd at every order (no order measured for the two-stage solver)"
    return f"the two-stage solver above order {above}, the platform's own syevd up to it"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxmg.info", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--n", type=int, default=4096, help="the matrices' order for the routes (default 4096)")
    parser.add_argument("--dtype", default="float64", help="their dtype (default float64)")
    args = parser.parse_args(argv)
    info = report(args.n, args.dtype)
    print(json.dumps(info, indent=2, default=str) if args.json else format_report(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
