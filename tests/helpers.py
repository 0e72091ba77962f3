"""Shared test helpers: problem generators, meshes and LAPACK-style scaled residuals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

ROOT = Path(__file__).resolve().parents[1]

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]

#: jaxmg's operations: the functions with a backend (native or portable) and a status, and the
#: modules that keep a factorisation.
OPERATIONS = ("potrs", "cholesky", "lu_solve", "least_squares", "qr", "syevd", "sygvd", "gesvd", "polar")
MODULES = ("Cholesky", "LU", "QR", "Eigh", "SVD", "Polar")

#: name -> (mesh shape, axis names, spec of a); names ending in "-auto" use Auto mesh axes
LAYOUTS = {
    "rows-1d": ((8,), ("i",), P("i", None)),
    "cols-1d": ((8,), ("i",), P(None, "i")),
    "grid-8x1": ((8, 1), ("x", "y"), P("x", "y")),
    "grid-4x2": ((4, 2), ("x", "y"), P("x", "y")),
    "grid-2x4": ((2, 4), ("x", "y"), P("x", "y")),
    "grid-1x8": ((1, 8), ("x", "y"), P("x", "y")),
    "grid-4x2-auto": ((4, 2), ("x", "y"), P("x", "y")),
    "cols-1d-auto": ((8,), ("i",), P(None, "i")),
}


def pattern_test(pattern, found, not_found):
    """A test of the regular expression ``pattern`` against its own examples, one case per text:
    it finds a match in each text of ``found`` and in none of ``not_found``. Bind it to a
    ``test_...`` name of the test module."""
    cases = [(text, True) for text in found] + [(text, False) for text in not_found]

    @pytest.mark.parametrize("text, expected", cases)
    def test(text, expected):
        assert bool(pattern.search(text)) == expected, text

    return test


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def random_matrix(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def spd_matrix(rng, n, dtype):
    g = random_matrix(rng, (n, n), dtype)
    return (g @ g.conj().T / n + np.eye(n)).astype(dtype)


def hermitian_matrix(rng, n, dtype):
    g = random_matrix(rng, (n, n), dtype)
    return ((g + g.conj().T) / 2).astype(dtype)


def conditioned(m, n, cond, dtype, seed=0):
    """A (m x n) with singular values geometric from 1 to 1 / cond."""
    rng = np.random.default_rng(seed)
    cplx = np.issubdtype(dtype, np.complexfloating)

    def unitary(k):
        g = rng.standard_normal((k, k)) + (1j * rng.standard_normal((k, k)) if cplx else 0)
        return np.linalg.qr(g)[0]

    s = np.geomspace(1.0, 1.0 / cond, n)
    return ((unitary(m)[:, :n] * s) @ np.conj(unitary(n)).T).astype(dtype)


#: Both mesh axis types, as a test parameter ("auto", "explicit").
AXES = [pytest.param(AxisType.Auto, id="auto"), pytest.param(AxisType.Explicit, id="explicit")]
#: Auto axes in the quick run; Explicit axes (where JAX's sharding types hold the layout) in the slow one.
AXES_EXPLICIT_SLOW = [AXES[0], pytest.param(AxisType.Explicit, id="explicit", marks=pytest.mark.slow)]


def make_mesh(shape, names, devices=None, axis_types=AxisType.Explicit):
    """A mesh of the first prod(shape) devices (or ``devices``), Explicit axes by default."""
    devices = np.asarray(jax.devices() if devices is None else devices)
    return Mesh(devices[: int(np.prod(shape))].reshape(shape), names, axis_types=(axis_types,) * len(shape))


def lower_read(a):
    """The Hermitian matrix that an operation reading only a's lower triangle computes with
    (Cholesky, eigh, sygvd): tril(a, -1) + tril(a, -1)^H + Re diag(a). References for those
    operations' derivatives are the JAX functions of ``lower_read(a)``."""
    import jax.numpy as jnp

    strict = jnp.tril(a, -1)
    return strict + jnp.conj(strict).swapaxes(-1, -2) + jnp.diag(jnp.real(jnp.diagonal(a))).astype(a.dtype)


def put(x, mesh, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def rows_spec(spec: P) -> P:
    """The right-hand-side spec matching a's rows (or columns on a column-split grid)."""
    entries = tuple(spec)
    return P(entries[0] if entries[0] is not None else entries[1])


def norm(x):
    return float(np.linalg.norm(np.asarray(x, dtype=np.complex128)))


def scaled(residual: float, scale: float, n: int, dtype) -> float:
    """LAPACK-style scaled residual: residual / (scale * n * eps); O(1) means backward stable."""
    return residual / (max(scale, np.finfo(np.float64).tiny) * n * eps(dtype))


def spec_of(x) -> P:
    spec = x.sharding.spec
    entries = tuple(spec) + (None,) * (x.ndim - len(tuple(spec)))
    return P(*entries)


def same_spec(x, expected: P) -> bool:
    want = tuple(expected) + (None,) * (x.ndim - len(tuple(expected)))
    return spec_of(x) == P(*want) or x.sharding.is_equivalent_to(NamedSharding(x.sharding.mesh, P(*want)), x.ndim)


def child_env(**overrides: str) -> dict:
    """The environment of a fresh Python process that a test starts: this one's without XLA_FLAGS
    (the child chooses its own devices), the jaxmg under test first on PYTHONPATH, then
    ``overrides``."""
    import jaxmg

    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(jaxmg.__file__).resolve().parents[1]), env.get("PYTHONPATH")])
    )
    env.update(overrides)
    return env


def run_benchmark(script: str, out: Path, *args: str, timeout: int = 600) -> list[dict]:
    """Run benchmarks/``script`` with ``args`` and ``--out out`` in a fresh process (its own 8
    simulated devices) and return the records it wrote; its exit status must be 0."""
    command = [sys.executable, str(ROOT / "benchmarks" / script), *args, "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, env=child_env(), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in Path(out).read_text().splitlines()]


def run_ranks_without_launcher(mode, dead, pid_dir, *, init="jaxmg", platform="cpu", env=None, timeout=240):
    """Start tests/launch_scripts/fault.py MODE DEAD as 2 plain processes (no jaxmg.launch).

    init: "jaxmg" joins through jaxmg.launch.initialize_from_environment (JAXMG_* variables set
    here), "jax" calls jax.distributed.initialize(..., **failure_detection_settings()) itself
    (CPU only). Waits for the survivor (the rank that is not ``dead``) and returns (its exit
    status, its output, seconds from the failure to its end, the dead rank's exit status).
    """
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from jaxmg import launch

    tests = Path(__file__).resolve().parent
    coordinator = f"127.0.0.1:{launch._free_port()}"
    procs = []
    for rank in range(2):
        child = {k: v for k, v in os.environ.items() if not k.startswith("JAXMG_")}
        child.pop("XLA_FLAGS", None)  # one device per process
        child["PYTHONPATH"] = os.pathsep.join(
            [str(Path(launch.__file__).resolve().parents[1])]
            + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        )
        if init == "jaxmg":
            child.update(
                JAXMG_COORDINATOR=coordinator,
                JAXMG_NUM_PROCESSES="2",
                JAXMG_PROCESS_ID=str(rank),
                JAXMG_PLATFORM=platform,
            )
            if platform == "gpu":
                child["JAXMG_LOCAL_DEVICE_IDS"] = str(rank)
        else:
            child.update(FAULT_COORDINATOR=coordinator, FAULT_PROCESS_ID=str(rank))
        if platform == "cpu":
            child.update(JAX_PLATFORMS="cpu", OPENBLAS_NUM_THREADS="1")
        child.update(launch.CHILD_ENV)
        child.update(env or {})
        procs.append(
            subprocess.Popen(
                [sys.executable, str(tests / "launch_scripts" / "fault.py"), mode, str(dead), str(pid_dir)],
                env=child,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    survivor = procs[1 - dead]
    try:
        out, _ = survivor.communicate(timeout=timeout)
        ended = time.time()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    seconds = ended - float((Path(pid_dir) / "failed_at").read_text())
    return survivor.returncode, out, seconds, procs[dead].returncode


#: check_grads orders: order 1 in the default run, order 2 (which checks order 1 as well) with
#: ``bash tests/run.sh --slow``, which CI runs too. Order 2 compiles the derivative of every
#: derivative and dominates the default run's time on 2 cores.
ORDERS = [1, pytest.param(2, marks=pytest.mark.slow)]


#: (dtype, scale) of the matrices whose least-squares derivatives are checked at large and small
#: norms: float32 (64-bit mode off) beyond where ||A||^2 leaves its range, float64 near it.
SCALED_NORMS = pytest.mark.parametrize(
    "dtype,scale", [(np.float32, 1e-20), (np.float32, 1e20), (np.float64, 1e-150), (np.float64, 1e150)]
)


def scaled_derivatives(op, a, b, scale, second: bool):
    """(b's gradient, x's forward derivative along b, [a's gradient, the mixed second derivative])
    of sum(op(a, b)) at ``scale * a``, multiplied by the powers of ``scale`` that undo it:
    x(s A, b) = x(A, b) / s, so they equal the derivatives at ``a``."""
    f = lambda a, b: jnp.sum(op(a, b))  # noqa: E731
    g_a, g_b = jax.grad(f, (0, 1))(a * scale, b)
    forward = jax.jvp(lambda b: op(a * scale, b), (b,), (b,))[1]
    if not second:
        return [g_b * scale, forward * scale]
    mixed = jax.jacfwd(jax.grad(f, 1), 0)(a * scale, b)
    return [g_b * scale, forward * scale, g_a * scale**2, mixed * scale**2]


def assert_scale_free_derivatives(op, a, b, scale: float) -> None:
    """The derivatives of :func:`scaled_derivatives` at ``scale`` equal those at 1 within 30 N eps
    relative (a's gradient and the mixed second derivative in float64 only: in float32 they are
    about 1 / scale^2, out of range); float32 runs with 64-bit mode off."""
    dtype = np.dtype(a.dtype)
    second = dtype == np.float64
    with jax.enable_x64(second):
        a, b = jnp.asarray(a), jnp.asarray(b)
        got = scaled_derivatives(op, a, b, scale, second)
        want = scaled_derivatives(op, a, b, 1.0, second)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        assert np.max(np.abs(np.asarray(g) - np.asarray(w))) <= 30 * a.shape[-2] * np.finfo(dtype).eps * np.max(
            np.abs(w)
        )
