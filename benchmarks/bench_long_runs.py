"""Long runs: does host memory or any jaxmg cache grow over many repeated eager calls?

    python benchmarks/bench_long_runs.py                       # 1,000 calls per case, N = 16
    python benchmarks/bench_long_runs.py --calls 200 --cases potrs,grad_logdet

Runs in this process on 8 simulated CPU devices when there is no GPU, on a (4, 2) mesh of
Explicit axes; on GPUs over every device of the job (one process per GPU under
``python -m jaxmg.launch -n NGPUS``), on a (d, 1) mesh for one or two GPUs; float64, with the
backend of ``--backend``
(default ``portable``). Each case calls one public operation eagerly, ``--calls`` times, on
inputs placed anew for every call (as a loop over data would), after ``--warmup`` calls that
compile what the case needs. ``--inputs host`` places them from host memory (NumPy) each call;
``--inputs device`` (the default) copies arrays placed once into fresh device buffers, so that
a call's time is the operation's and not the host-to-device transfer's. Between the warm-up and
the end it samples:

  rss_mib        the process's resident set size (VmRSS of /proc/self/status), also at each
                 tenth of the calls (rss_trace_mib), and its growth over the second half
                 (rss_growth_second_half_mib: a leak keeps growing there, allocator warm-up
                 does not);
  live_arrays    jax.live_arrays(): every array still held (device memory, or host on CPU);
  caches         the sizes of jaxmg's Python-side caches of compiled functions:
                 the public boundary's compiled calls (_dispatch._compiled);
  device_bytes   bytes in use on this process's GPU (None on CPU);
  native_cache   the native grid cache: communicators, descriptors, workspace bytes (None
                 where the native backend cannot run).

On GPUs (1,000 calls of each native operation at N = 4,096):
``python -m jaxmg.launch -n 2 benchmarks/bench_long_runs.py --backend native --n 4096 --cases
potrs,cholesky,lu_solve,...`` (scripts/gpu/steps.sh step ``long``).

and writes one JSON line per case: case, calls, n, devices, rss_start_mib, rss_end_mib,
rss_growth_mib, live_arrays_start/_end, caches_start/_end ({name: size}), cache_growth
({name: entries added during the measured calls}), seconds_per_call. Targets: no
growth of RSS beyond allocator noise and no cache growth after warm-up.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from _common import results_path  # noqa: E402
from bench_potrs import _emit  # noqa: E402  (shared JSON-lines output)
from jaxmg.launch import simulate_cpu_devices_without_gpu  # noqa: E402  (imports no JAX backend)

#: (module, attribute) of each functools.lru_cache of compiled functions in jaxmg.
CACHES = {
    "_dispatch._compiled": ("jaxmg._dispatch", "_compiled"),
}


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument(
        "--eager-grad-calls",
        type=int,
        default=None,
        help="calls of the eager_grad_* cases (default: --calls; their compiled calls are cached "
        "after the first, as for the other cases)",
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--backend", default="portable", choices=("portable", "native", "auto"))
    p.add_argument("--cases", default="all", help="comma-separated case names, all, or fast (all but eager_grad_*)")
    p.add_argument(
        "--inputs",
        default="device",
        choices=("device", "host"),
        help="fresh inputs per call: device copies of arrays placed once, or placed from NumPy",
    )
    p.add_argument("--out", default=str(results_path("long_runs.jsonl")))
    return p.parse_args(argv)


def rss_mib() -> float:
    """Resident set size of this process in MiB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def cache_sizes() -> dict[str, int]:
    """Entries in each of jaxmg's caches of compiled functions (missing ones are skipped)."""
    import importlib

    sizes = {}
    for name, (module, attr) in CACHES.items():
        fn = getattr(importlib.import_module(module), attr, None)
        if fn is not None and hasattr(fn, "cache_info"):
            sizes[name] = fn.cache_info().currsize
    return sizes


def mesh_shape(devices: int) -> tuple[int, int]:
    """The (rows, columns) grid over ``devices``: (4, 2) for the 8 simulated CPU devices, (d, 1)
    below 4 devices (one or two GPUs), else two columns."""
    return (devices, 1) if devices < 4 or devices % 2 else (devices // 2, 2)


def device_bytes_in_use():
    """Bytes in use on this process's first device (the GPU's memory), or None where the
    platform does not report it (CPU)."""
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    return stats.get("bytes_in_use")


def native_cache():
    """The native grid cache's sizes (communicators, descriptors, workspace bytes), or None
    where the native backend cannot run."""
    from jaxmg.kernels import native

    if native.unavailable_reason() is not None:
        return None
    return dict(native.info().get("cache", {}))


def cases(n: int, backend: str, inputs: str = "device") -> dict:
    """name -> a function of nothing that runs one eager call on freshly placed inputs."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg

    mesh = jax.make_mesh(mesh_shape(jax.device_count()), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, n))
    spd, her = g @ g.T / n + np.eye(n), (g + g.T) / 2
    tall = rng.standard_normal((2 * n, n))
    rhs, rhs_tall = rng.standard_normal(n), rng.standard_normal(2 * n)

    def placer(spec):
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0]) if spec is None else NamedSharding(mesh, spec)
        if inputs == "host":
            return lambda x: jax.device_put(x, sharding)
        placed = {}  # id of the NumPy array -> its device copy, made once

        def fresh(x):
            if id(x) not in placed:
                placed[id(x)] = jax.device_put(x, sharding)
            return jnp.array(placed[id(x)], copy=True)  # a new device buffer per call

        return fresh

    matrix, vector = placer(P("x", "y")), placer(P("x"))

    kw = {"backend": backend}

    def eager_grad(loss, a):
        with jax.set_mesh(mesh):  # eager reductions over Explicit axes need the mesh set
            return jax.grad(loss)(a)

    def jitted_grad(loss):
        return jax.jit(jax.grad(loss))  # built once, called many times

    losses = {
        "potrs": (lambda a: jnp.sum(jaxmg.potrs(a, vector(rhs), **kw)), spd),
        "logdet": (lambda a: jaxmg.potrs(a, vector(rhs), return_logdet=True, **kw)[1], spd),
        "cholesky": (lambda a: jnp.sum(jaxmg.cholesky(a, **kw)), spd),
        "syevd": (lambda a: jnp.sum(jaxmg.syevd(a, return_eigenvectors=False, **kw)), her),
    }
    grads = {name: jitted_grad(loss) for name, (loss, _) in losses.items()}

    potrs_jit = jax.jit(lambda a, b: jaxmg.potrs(a, b, **kw))  # jitted once, called many times
    lu_once = functools.lru_cache(maxsize=1)(lambda: jaxmg.LU(matrix(g), **kw))  # factored once
    jax_cho_solve = jax.jit(lambda a, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), b))
    single = placer(None)  # one device
    return {
        "potrs": lambda: jaxmg.potrs(matrix(spd), vector(rhs), return_logdet=True, **kw),
        "cholesky": lambda: jaxmg.cholesky(matrix(spd), **kw),
        "lu_solve": lambda: jaxmg.lu_solve(matrix(g), vector(rhs), **kw),
        "least_squares": lambda: jaxmg.least_squares(matrix(tall), vector(rhs_tall), **kw),
        "qr": lambda: jaxmg.qr(matrix(tall), **kw),
        "syevd": lambda: jaxmg.syevd(matrix(her), **kw),
        "sygvd": lambda: jaxmg.sygvd(matrix(her), matrix(spd), **kw),
        "gesvd": lambda: jaxmg.gesvd(matrix(tall), **kw),
        "polar": lambda: jaxmg.polar(matrix(tall), **kw),
        "Cholesky.solve": lambda: jaxmg.Cholesky(matrix(spd), **kw).solve(vector(rhs)),
        "LU": lambda: jaxmg.LU(matrix(g), **kw).lu,  # the factor only (getrf)
        "LU.solve": lambda: lu_once().solve(vector(rhs)),  # a solve (getrs) with one saved factor
        "potrs_jit": lambda: potrs_jit(matrix(spd), vector(rhs)),
        # Control: plain JAX (no jaxmg) on one device, jitted once: what the runtime itself gains per call.
        "jax_cho_solve": lambda: jax_cho_solve(single(spd), single(rhs)),
        # Derivatives: jax.grad jitted once; and eagerly (jax.grad outside jit: the first call
        # compiles, later calls reuse jaxmg's cached compiled calls; they trace the loss anew).
        **{f"grad_{name}": (lambda f=grads[name], x=x: f(matrix(x))) for name, (_, x) in losses.items()},
        **{
            f"eager_grad_{name}": (lambda loss=loss, x=x: eager_grad(loss, matrix(x)))
            for name, (loss, x) in losses.items()
        },
    }


def snapshot() -> dict:
    """What a long run may grow, now: the resident set ("rss", MiB), the live arrays' count, the
    cache sizes, the device's bytes in use and the native backend's caches."""
    import jax

    return {
        "rss": rss_mib(),
        "arrays": len(jax.live_arrays()),
        "caches": cache_sizes(),
        "device": device_bytes_in_use(),
        "native": native_cache(),
    }


def measure(name: str, call, calls: int, warmup: int) -> dict:
    """Run ``call`` warmup + calls times; RSS, live arrays and cache sizes before and after."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(call())
    gc.collect()
    start = snapshot()
    trace = []
    t0 = time.perf_counter()
    for i in range(calls):
        jax.block_until_ready(call())
        if (i + 1) % max(calls // 10, 1) == 0:
            trace.append(round(rss_mib(), 1))
    seconds = time.perf_counter() - t0
    gc.collect()
    end = snapshot()
    return {
        "case": name,
        "calls": calls,
        "rss_start_mib": round(start["rss"], 1),
        "rss_end_mib": round(end["rss"], 1),
        "rss_growth_mib": round(end["rss"] - start["rss"], 1),
        "rss_trace_mib": trace,
        "rss_growth_second_half_mib": round(trace[-1] - trace[len(trace) // 2 - 1], 1) if len(trace) >= 2 else None,
        "live_arrays_start": start["arrays"],
        "live_arrays_end": end["arrays"],
        "caches_start": start["caches"],
        "caches_end": end["caches"],
        "cache_growth": {k: end["caches"][k] - start["caches"].get(k, 0) for k in end["caches"]},
        "device_bytes_start": start["device"],
        "device_bytes_end": end["device"],
        "native_cache_start": start["native"],
        "native_cache_end": end["native"],
        "seconds_per_call": round(seconds / max(calls, 1), 5),
    }


def main(argv=None) -> int:
    args = _args(argv)
    simulate_cpu_devices_without_gpu(8)
    import jax

    jax.config.update("jax_enable_x64", True)
    table = cases(args.n, args.backend, args.inputs)
    names = {"all": list(table), "fast": [k for k in table if not k.startswith("eager_grad_")]}.get(
        args.cases, args.cases.split(",")
    )
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; choose from {sorted(table)}")
    for name in names:
        eager_grad = name.startswith("eager_grad_")
        calls = args.eager_grad_calls if eager_grad and args.eager_grad_calls is not None else args.calls
        record = measure(name, table[name], calls, args.warmup)
        record.update(
            n=args.n,
            devices=jax.device_count(),
            processes=jax.process_count(),
            backend=args.backend,
            inputs=args.inputs,
        )
        if jax.process_index() == 0:
            _emit(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
