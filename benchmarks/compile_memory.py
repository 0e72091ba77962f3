"""XLA's memory plan of jaxmg's and plain JAX's programs compiled for a GPU that is not attached.

    pip install jax-cuda13-plugin==V jax-cuda13-pjrt==V    # V: jaxlib's version; no GPU, no driver
    python benchmarks/compile_memory.py --cases gp_vg potrs_grad --sizes 32768

Each case of bench_memory.py that is one compiled call is lowered and compiled for one GPU of
the model named by ``--device`` (default the H200), through a compile-only device of XLA's CUDA
plugin (``jax.experimental.topologies``, with the GPU's description that the plugin carries,
or ``--target-config FILE``, a ``GpuTargetConfigProto`` in text). XLA's memory analysis of the
compiled program is recorded, one JSON line per case (``--out``): temp_bytes, the buffers XLA
allocates beyond the arguments and outputs (on a GPU the program's peak beyond them: the
measured peaks of bench_memory.py match it to 0.1%), and temp_matrices, over one N x N matrix.
The ``*_grid`` cases are jaxmg's distributed route (cuSOLVERMp's kernels on a 1 x 1 process
grid, ``a`` laid out ``P("x", "y")``), as called by default (the result check on) and, with
``_unchecked``, with ``check=False``.

Nothing runs. jaxmg's own handlers (the native library's FFI targets, which XLA looks up while
it compiles) are registered as placeholders that do nothing, compiled here with ``g++`` from
the XLA FFI headers that jaxlib ships, and jaxmg is told that its native library is loaded,
so that it takes the routes it takes on that GPU. The programs are XLA's for the GPU:
fusion, buffer assignment and in-place reuse are decided by its GPU compiler. The device's own
peak, and the time, come from bench_memory.py and bench_gp.py on the GPU.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import RESULTS, case_record, emit  # noqa: E402

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no GPU client: the GPU is a compile-only target
os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # the CUDA libraries are not needed to compile

import bench_memory  # noqa: E402

#: The distributed route's cases (jaxmg only): the default call, and ``_unchecked`` with check=False.
GRID_CASES = tuple(
    f"{op}_grid{how}"
    for op in ("potrs", "lu_solve", "cholesky", "cholesky_inverse", "gp_vg")
    for how in ("", "_unchecked")
)
CASES = (
    tuple(c for c in bench_memory.CASES if c not in bench_memory.DONATED + ("cholesky_inverse_donated", "gp_vg_eager"))
    + GRID_CASES
)

_PLACEHOLDER = r"""
#include "xla/ffi/api/ffi.h"
// A handler XLA finds while it compiles a program that calls it; the program is never run.
static xla::ffi::Error Placeholder(xla::ffi::RemainingArgs, xla::ffi::RemainingRets) {
  return xla::ffi::Error(xla::ffi::ErrorCode::kUnimplemented, "compile-only placeholder");
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_compile_only, Placeholder,
                              xla::ffi::Ffi::Bind().RemainingArgs().RemainingRets());
"""

#: jaxmg's FFI targets (csrc/): the names XLA must find to compile a program that calls them.
TARGETS = (
    "jaxmg_gemm",
    "jaxmg_geqrf",
    "jaxmg_getrf",
    "jaxmg_getri",
    "jaxmg_getrs",
    "jaxmg_identity",
    "jaxmg_nccl_id",
    "jaxmg_orgqr",
    "jaxmg_potrf",
    "jaxmg_potri",
    "jaxmg_potrs",
    "jaxmg_relayout",
    "jaxmg_syevd",
    "jaxmg_sygvd",
    "jaxmg_trmm",
)

DEVICE_NAMES = {"h200": "NVIDIA H200 141GB HBM3e", "h100": "NVIDIA H100 80GB HBM3"}


def _args(argv=None):
    p = bench_memory.case_parser(__doc__, CASES)
    p.add_argument("--device", default="h200", choices=sorted(DEVICE_NAMES))
    p.add_argument("--target-config", default=None, help="a GpuTargetConfigProto in text (default: the plugin's)")
    p.add_argument("--out", default=None, help="JSON lines (default benchmarks/results/DEVICEx1-compiled/DATE/)")
    return p.parse_args(argv)


def plugin_target_config(device_name: str) -> str:
    """The description of ``device_name`` (a GpuTargetConfigProto in text) that XLA's CUDA plugin
    carries for deviceless compilation, read from the plugin's library."""
    import jax_plugins.xla_cuda13 as plugin

    library = Path(plugin.__file__).parent / "xla_cuda_plugin.so"
    data = library.read_bytes()
    mark = f'device_description_str: "{device_name}"'.encode()
    at = data.find(mark)
    if at < 0:
        raise SystemExit(f"{library} carries no description of {device_name!r}: pass --target-config FILE.")
    start, end = data.rfind(b"\0", 0, at) + 1, data.find(b"\0", at)
    return data[start:end].decode()


def register_placeholders(device_bytes: int) -> None:
    """Register a do-nothing handler under each of jaxmg's FFI targets for CUDA, and make jaxmg
    see its native library as loaded and a device of ``device_bytes`` (it then takes the routes,
    and calls the kernels, that it takes on that GPU)."""
    import jax

    build = Path(tempfile.gettempdir()) / "jaxmg-compile-only"
    build.mkdir(exist_ok=True)
    library = build / "placeholder.so"
    if not library.exists():
        (build / "placeholder.cc").write_text(_PLACEHOLDER)
        done = subprocess.run(
            [
                "g++",
                "-std=c++17",
                "-O1",
                "-shared",
                "-fPIC",
                f"-I{jax.ffi.include_dir()}",
                str(build / "placeholder.cc"),
                "-o",
                str(library),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"g++ could not compile the placeholder handlers:\n{done.stderr}")
    handler = jax.ffi.pycapsule(ctypes.CDLL(str(library)).jaxmg_compile_only)
    native = types.ModuleType("jaxmg._native")
    native.load = lambda *paths: True
    native.load_error = lambda: ""
    native.handlers = lambda: {name: handler for name in TARGETS}
    native.capabilities = lambda: dict.fromkeys(
        (
            "potrf",
            "potrs",
            "getrf",
            "getrs",
            "geqrf",
            "orgqr",
            "syevd",
            "sygvd",
            "gesvd",
            "polar",
            "tiled_solve",
            "gemm",
            "relayout",
        ),
        True,
    )
    native.set_process_index = lambda index: None
    sys.modules["jaxmg._native"] = native
    import jaxmg
    from jaxmg import _routes

    jaxmg._native = native
    _routes.device_bytes = lambda mesh: device_bytes


def compile_only_device(config: str):
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(platform="cuda", topology_name="", target_config=config, topology="1x1x1")
    return topology.devices[0]


def arguments(case, impl, n, dtype, device):
    """(function, abstract arguments) of a case, placed on the compile-only ``device``."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.sharding.Mesh([[device]], ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    if case in GRID_CASES:
        return grid_arguments(case, mesh, n, dtype)
    if case.startswith("gp_vg"):
        import bench_gp

        loss = bench_gp.loss_fn(
            impl,
            NamedSharding(mesh, P("x", None)),
            "auto" if impl == "jaxmg" else None,
            checkpoint=case == "gp_vg_checkpoint",
        )
        rows, every = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
        return jax.value_and_grad(loss), (
            jax.ShapeDtypeStruct((3,), dtype, sharding=every),
            jax.ShapeDtypeStruct((n, 3), dtype, sharding=rows),
            jax.ShapeDtypeStruct((n,), dtype, sharding=rows),
        )
    one = NamedSharding(mesh, P())  # one device: the GPU's own solver, as jax.devices()[0] there
    a = jax.ShapeDtypeStruct((n, n), dtype, sharding=one)
    b = jax.ShapeDtypeStruct((n,), dtype, sharding=one)
    fn, takes_b = bench_memory.matrix_case(case, impl)
    return fn, ((a, b) if takes_b else (a,))


def grid_arguments(case, mesh, n, dtype):
    """(function of (a, b), abstract (a, b)) of a distributed-route case on the 1 x 1 ``mesh``."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxmg

    op, _, how = case.partition("_grid")
    kw = dict(backend="native", T_A=min(1024, n), check=False if how == "_unchecked" else None)

    def gp(a, b):
        x, logdet = jaxmg.potrs(a, b, return_logdet=True, **kw)
        return jnp.vdot(b, x) + logdet

    calls = {
        "potrs": lambda a, b: jaxmg.potrs(a, b, **kw),
        "lu_solve": lambda a, b: jaxmg.lu_solve(a, b, **kw),
        "cholesky": lambda a, b: jaxmg.cholesky(a, **kw),
        "cholesky_inverse": lambda a, b: jaxmg.Cholesky(a, **kw).inverse(),
        "gp_vg": jax.value_and_grad(gp),
    }
    a = jax.ShapeDtypeStruct((n, n), dtype, sharding=NamedSharding(mesh, P("x", "y")))
    b = jax.ShapeDtypeStruct((n,), dtype, sharding=NamedSharding(mesh, P("x")))
    return calls[op], (a, b)


def record(case, impl, n, dtype, device, device_name) -> dict:
    import jax

    matrix = n * n * jax.numpy.dtype(dtype).itemsize
    rec = case_record("compile_memory", case, impl, n, dtype, device_name, compiled_for="gpu (compile-only device)")
    try:
        fn, args = arguments(case, impl, n, dtype, device)
        start = time.perf_counter()
        with jax.set_mesh(args[0].sharding.mesh):
            analysis = jax.jit(fn).trace(*args).lower().compile().memory_analysis()
        rec.update(
            temp_bytes=int(analysis.temp_size_in_bytes),
            output_bytes=int(analysis.output_size_in_bytes),
            argument_bytes=int(analysis.argument_size_in_bytes),
            temp_matrices=analysis.temp_size_in_bytes / matrix,
            compile_s=time.perf_counter() - start,
        )
    except Exception as e:  # a case that does not compile is recorded, never hidden
        rec["error"] = f"{type(e).__name__}: {str(e)[:1000]}"
    return rec


def main(argv=None):
    args = _args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    device_name = DEVICE_NAMES[args.device]
    config = Path(args.target_config).read_text() if args.target_config else plugin_target_config(device_name)
    memory = int(re.search(r"device_memory_size: (\d+)", config).group(1))
    register_placeholders(int(0.94 * memory))  # the share of the device that bench_memory.py gives XLA
    device = compile_only_device(config)
    out = args.out or str(RESULTS / f"{args.device}x1-compiled" / time.strftime("%Y-%m-%d") / "compile_memory.jsonl")
    for n in args.sizes:
        for dtype in args.dtypes:
            for case in args.cases:
                for impl in args.impls:
                    if impl == "jax" and (case in bench_memory.ONLY_JAXMG or case in GRID_CASES):
                        continue
                    emit(out, record(case, impl, n, dtype, device, device_name))


if __name__ == "__main__":
    main()
