"""jaxmg on a TPU (or any one accelerator): each operation, float32, eager, under jax.jit and
its gradient under jax.jit, checked with LAPACK's test ratios against numpy in float64 on the
host. Prints one table row per case and exits non-zero if a case fails, errs or runs past its
time limit. Each (operation, N) runs in its own process, killed after ``--timeout`` seconds.

    PYTHONPATH=$PWD python scripts/tpu_check.py                 # N = 1024 and 4096
    PYTHONPATH=$PWD python scripts/tpu_check.py --n 256 --ops potrs eigh --timeout 120

A ratio is a residual over (N eps |A|) (times cond(A) where the quantity is that sensitive);
LAPACK's test suites pass a ratio below 30. ``jnp_eigh`` is JAX's own ``jnp.linalg.eigh`` on the
same matrix, a reference for eigh's time (jaxmg's eigh on one device is JAX's eigensolver too).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

THRESHOLD = 30.0
OPS = ("potrs", "lu_solve", "least_squares", "cholesky", "solve", "inv", "det", "slogdet", "eigh", "svd", "jnp_eigh")
#: Cases of JAX's own functions, run as references (their time beside jaxmg's).
REFERENCES = {"jnp_eigh": "eigh"}
EPS = float(np.finfo(np.float32).eps)


def _norm(x) -> float:
    return float(np.linalg.norm(np.asarray(x, np.float64)))


def _matrices(op: str, n: int):
    """(a, b) in float64 on the host: SPD for potrs and cholesky, symmetric for eigh, tall
    (n, n/2) for least_squares and svd, else general and well scaled (det stays finite)."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, n))
    b = rng.standard_normal((n, 4))
    if op in ("potrs", "cholesky"):
        return x @ x.T / n + 0.1 * np.eye(n), b
    if REFERENCES.get(op, op) == "eigh":
        return (x + x.T) / 2, b
    if op in ("least_squares", "svd"):
        return x[:, : n // 2], b
    return np.eye(n) + 0.5 * x / np.sqrt(n), b


def _cases(op: str, a, b):
    """(primal, scalar) of ``op`` on device arrays: the function whose outputs are checked and a
    scalar function of ``a`` or ``b`` whose gradient is."""
    import jax.numpy as jnp

    import jaxmg
    import jaxmg.numpy.linalg as la

    if op == "potrs":
        return (lambda a, b: jaxmg.potrs(a, b)), (lambda a, b: jnp.sum(jaxmg.potrs(a, b)))
    if op == "lu_solve":
        return (lambda a, b: jaxmg.lu_solve(a, b)), (lambda a, b: jnp.sum(jaxmg.lu_solve(a, b)))
    if op == "least_squares":
        return (lambda a, b: jaxmg.least_squares(a, b)), (lambda a, b: jnp.sum(jaxmg.least_squares(a, b)))
    if op == "solve":
        return (lambda a, b: la.solve(a, b)), (lambda a, b: jnp.sum(la.solve(a, b)))
    if op == "cholesky":
        return (lambda a, b: jaxmg.cholesky(a)), (lambda a, b: jnp.sum(jnp.log(jnp.diagonal(jaxmg.cholesky(a)))))
    if op == "inv":
        return (lambda a, b: la.inv(a)), (lambda a, b: jnp.trace(la.inv(a)))
    if op == "det":
        return (lambda a, b: la.det(a)), (lambda a, b: la.det(a))
    if op == "slogdet":
        return (lambda a, b: la.slogdet(a)), (lambda a, b: la.slogdet(a)[1])
    if op == "eigh":
        c = jnp.linspace(0, 1, a.shape[0], dtype=a.dtype)
        return (lambda a, b: la.eigh(a)), (lambda a, b: jnp.sum(c * la.eigh(a)[0]))
    if op == "jnp_eigh":
        c = jnp.linspace(0, 1, a.shape[0], dtype=a.dtype)
        return (lambda a, b: jnp.linalg.eigh(a)), (lambda a, b: jnp.sum(c * jnp.linalg.eigh(a)[0]))
    if op == "svd":
        return (lambda a, b: la.svd(a, full_matrices=False)), (lambda a, b: jnp.sum(la.svd(a, compute_uv=False)))
    raise ValueError(f"op must be one of {OPS}; got {op!r}")


def _ratio(op: str, a: np.ndarray, b: np.ndarray, out) -> float:
    """LAPACK's test ratio of ``op``'s outputs ``out`` (host float64) for ``a``, ``b``."""
    op = REFERENCES.get(op, op)
    n = a.shape[0]
    na = _norm(a)
    if op in ("potrs", "lu_solve", "solve"):
        return _norm(a @ out - b) / (n * EPS * na * _norm(out))
    if op == "least_squares":
        r = b - a @ out
        return _norm(a.T @ r) / (n * EPS * na * (na * _norm(out) + _norm(b)))
    if op == "cholesky":
        return _norm(out @ out.T - a) / (n * EPS * na)
    if op == "inv":
        return _norm(np.eye(n) - a @ out) / (n * EPS * na * _norm(out))
    if op in ("det", "slogdet"):
        sign, ref = np.linalg.slogdet(a)
        cond = np.linalg.cond(a, 1)
        if op == "det":
            return abs(out - sign * np.exp(ref)) / (n * EPS * cond * abs(np.exp(ref)))
        return max(abs(out[0] - sign) / EPS, abs(out[1] - ref) / (n * EPS * cond))
    if op == "eigh":
        w, v = out
        return max(
            _norm(a @ v - v * w) / (n * EPS * na),
            _norm(v.T @ v - np.eye(n)) / (n * EPS),
            np.max(np.abs(w - np.linalg.eigvalsh(a))) / (n * EPS * na / np.sqrt(n)),
        )
    u, s, vh = out
    return max(_norm(a - (u * s) @ vh) / (n * EPS * na), _norm(u.T @ u - np.eye(s.size)) / (n * EPS))


def _gradient_ratio(op: str, a: np.ndarray, b: np.ndarray, grad: np.ndarray) -> float:
    """The gradient's distance from its float64 formula, over (N eps |formula| cond(A))."""
    op = REFERENCES.get(op, op)
    n = a.shape[0]
    inv = np.linalg.pinv(a) if op == "least_squares" else (np.linalg.inv(a) if op not in ("eigh", "svd") else None)
    if op in ("potrs", "lu_solve", "solve", "least_squares"):
        ref = inv.T @ np.ones((inv.shape[0], b.shape[1]))  # d sum(x) / d b
    elif op == "cholesky":
        ref, grad = inv / 2, (grad + grad.T) / 2  # sum log diag L = log det a / 2; a's lower triangle is read
    elif op == "inv":
        ref = -(inv @ inv).T
    elif op == "det":
        ref = np.linalg.det(a) * inv.T
    elif op == "slogdet":
        ref = inv.T
    elif op == "eigh":
        w, v = np.linalg.eigh(a)
        ref, grad = (v * np.linspace(0, 1, n)) @ v.T, (grad + grad.T) / 2
    else:
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        ref = u @ vh
    square = a.shape[0] == a.shape[1]
    cond = 1.0 if op in ("eigh", "svd") else (np.linalg.cond(a, 1) if square else np.linalg.cond(a))
    return _norm(grad - ref) / (n * EPS * _norm(ref) * cond)


def run_case(op: str, n: int) -> dict:
    """Runs ``op`` at order ``n`` eagerly, under jit and its gradient under jit; one record per mode."""
    import jax
    import jax.numpy as jnp

    a64, b64 = _matrices(op, n)
    a, b = jnp.asarray(a64, jnp.float32), jnp.asarray(b64, jnp.float32)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)  # the matrices the device holds
    primal, scalar = _cases(op, a, b)
    wrt = 1 if op in ("potrs", "lu_solve", "solve", "least_squares") else 0
    modes = {"eager": primal, "jit": jax.jit(primal), "grad": jax.jit(jax.grad(scalar, argnums=wrt))}
    records = {}
    for mode, f in modes.items():
        start = time.perf_counter()
        out = jax.block_until_ready(f(a, b))
        first = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(f(a, b))
        again = time.perf_counter() - start
        host = jax.tree.map(lambda x: np.asarray(x, np.float64), out)
        host = tuple(host) if isinstance(host, (tuple, list)) or hasattr(host, "_fields") else host
        ratio = _gradient_ratio(op, a64, b64, host) if mode == "grad" else _ratio(op, a64, b64, host)
        records[mode] = {"ratio": float(ratio), "first_s": first, "again_s": again}
    return {"device": str(jax.devices()[0]), "jax": jax.__version__, "modes": records}


def _row(op: str, n: int, result: dict) -> tuple[str, bool]:
    if "error" in result:
        return f"{op:14s} {n:6d}  {'':5s} FAIL  {result['error']}", False
    cells, ok = [], True
    for mode, r in result["modes"].items():
        good = np.isfinite(r["ratio"]) and r["ratio"] <= THRESHOLD
        ok &= bool(good)
        cells.append(f"{mode}: {r['ratio']:8.3g} {'ok' if good else 'FAIL'} {r['first_s']:7.2f}s/{r['again_s']:7.3f}s")
    return f"{op:14s} {n:6d}  " + " | ".join(cells), ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1024, 4096], help="matrix orders")
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per (operation, N)")
    parser.add_argument("--case", nargs=2, metavar=("OP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:  # the child process: one case, one JSON line
        print(json.dumps(run_case(args.case[0], int(args.case[1]))))
        return 0
    print(f"{'operation':14s} {'N':>6s}  mode: ratio (<= {THRESHOLD:g}) status  first call / second call")
    failed = 0
    for n in args.n:
        for op in args.ops:
            result = _child(op, n, args.timeout)
            line, ok = _row(op, n, result)
            print(line, flush=True)
            failed += not ok
    print(f"{failed} case(s) failed" if failed else "all cases passed")
    return 1 if failed else 0


def _child(op: str, n: int, timeout: float) -> dict:
    """``op`` at order ``n`` in a process of its own, killed after ``timeout`` seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--case", op, str(n)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {done.returncode} after {time.perf_counter() - start:.0f} s: {tail[0][:160]}"}
    return json.loads(lines[-1])


if __name__ == "__main__":
    sys.exit(main())
