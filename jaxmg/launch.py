"""Run a JAX program as N cooperating processes on this host.

Usage::

    python -m jaxmg.launch -n N [options] [--] script.py [args ...]
    python -m jaxmg.launch -n N [options] [--] -m package.module [args ...]
    jaxmg-launch -n N [options] [--] script.py [args ...]     # console script

Options:

``-n N`` / ``--nproc N``
    Number of processes. On GPUs the default is one process per visible GPU;
    on CPU it must be given.
``--platform {auto,cpu,gpu}``
    ``auto`` (the default) picks ``gpu`` when a GPU is found and ``cpu``
    otherwise. GPUs are detected without importing JAX: ``nvidia-smi -L``,
    limited by ``CUDA_VISIBLE_DEVICES`` when that is set.
``--port PORT``
    Port of the JAX coordinator on 127.0.0.1 (default: a free one).
``--timeout SECONDS``
    Stop every process and exit with status 124 if the run takes longer.
``--grace SECONDS``
    How long stopped processes get between SIGTERM and SIGKILL (default 5).

What the launcher does
----------------------
It starts N copies of ``script.py args...`` (or ``-m module args...``) under
``sys.executable``, rank ``r`` = 0..N-1, each through ``jaxmg/_rank_main.py``
(which runs the target as ``__main__`` but ends the rank at once when the
target fails), and passes each the distributed configuration:

=========================  ===============================================
``JAXMG_COORDINATOR``      ``127.0.0.1:PORT`` (rank 0 hosts the service)
``JAXMG_NUM_PROCESSES``    ``N``
``JAXMG_PROCESS_ID``       ``r``
``JAXMG_LOCAL_DEVICE_IDS`` ``r`` (GPU only: process ``r`` drives GPU ``r``)
``JAXMG_PLATFORM``         ``cpu`` or ``gpu``
=========================  ===============================================

plus ``PYTHONUNBUFFERED=1``, NVLink multicast off (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``), and on CPU
``JAX_PLATFORMS=cpu`` and ``OPENBLAS_NUM_THREADS=1`` (unless set).
``CUDA_VISIBLE_DEVICES`` is left as it is: each process selects its GPU through
JAX's ``local_device_ids``. On CPU each process gets one CPU device and JAX's
gloo collectives, so ``N`` processes form an ``N``-device mesh.

``import jaxmg`` in a launched process calls :func:`initialize_from_environment`,
which calls ``jax.distributed.initialize``: the script must import ``jaxmg``
*before* it runs any JAX computation, and must not initialize
``jax.distributed`` itself.

Every output line of a process is copied to the launcher's stdout or stderr
prefixed with ``[rank r] ``, without the runtime's shutdown and Gloo connection
messages (``JAXMG_LAUNCH_RAW=1`` keeps them). SIGINT and SIGTERM are forwarded
to every process, a second one kills them; if the launcher dies, Linux kills
its processes (``PR_SET_PDEATHSIG``).

Faults
------
A rank whose target raises or exits non-zero prints its traceback and exits at
once (``os._exit``, skipping ``jax.distributed``'s shutdown barrier). The
launcher names the rank that failed first (``rank 1 failed first: it exited
with status 1``) with the last ``TAIL_LINES`` lines of its stderr, stops the
others (SIGTERM, SIGKILL after ``--grace``) and exits with that rank's status
(``128 + signal`` for a signal). Launched ranks run without JAX's preemption
service, and get :func:`failure_detection_settings`. See docs/processes.md.

Clusters (Slurm, Open MPI, ...)
-------------------------------
This launcher is for a single host. Under ``srun`` or ``mpirun``, start one
process per GPU and call
``jax.distributed.initialize(**failure_detection_settings())`` at the top of
the script; :func:`initialize_from_environment` then does nothing.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import numbers
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = ["failure_detection_settings", "initialize_from_environment", "main"]

ENV_COORDINATOR = "JAXMG_COORDINATOR"
ENV_NUM_PROCESSES = "JAXMG_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXMG_PROCESS_ID"
ENV_LOCAL_DEVICE_IDS = "JAXMG_LOCAL_DEVICE_IDS"
ENV_PLATFORM = "JAXMG_PLATFORM"

#: Environment every launched process gets (NVLink multicast off; unbuffered).
CHILD_ENV = {
    "PYTHONUNBUFFERED": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

DEFAULT_GRACE = 5.0
TIMEOUT_EXIT_CODE = 124

#: Seconds within which a process whose peer died stops with an error (see
#: :func:`failure_detection_settings`); read from the environment, default 60.
ENV_FAILURE_TIMEOUT = "JAXMG_FAILURE_TIMEOUT"
#: Where a launched rank's runner writes when its target failed (jaxmg/_rank_main.py).
ENV_FAILURE_STAMP = "JAXMG_FAILURE_STAMP"
#: After the first failed rank is seen, how long the launcher waits for others that ended with it
#: before naming the one that failed first (also lets the output threads copy its last lines).
SETTLE_SECONDS = 0.2
DEFAULT_FAILURE_TIMEOUT = 60.0

_initialized_here = False


# --- Inside a launched process (and under any other launcher) ---


def failure_detection_settings(timeout: float | int | None = None) -> dict[str, Any]:
    """Keyword arguments for ``jax.distributed.initialize`` that bound how long a dead peer goes unnoticed.

    JAX's coordination service declares a process dead when it has sent no heartbeat for
    ``heartbeat_timeout_seconds`` (JAX's default: 100 s), and then aborts every other process
    with an error that names it. This returns half of ``timeout``, so that detection and the
    error's propagation end within ``timeout``::

        jax.distributed.initialize(**jaxmg.launch.failure_detection_settings())

    ``jaxmg.launch`` applies it to every process it starts.

    Args:
      timeout: seconds (at least 4) within which a survivor of a dead process fails. None:
        the environment variable ``JAXMG_FAILURE_TIMEOUT``, else 60.

    Returns:
      ``{"heartbeat_timeout_seconds": ...}``, only with names that the installed JAX's
      ``jax.distributed.initialize`` accepts.
    """
    if timeout is None:
        value = os.environ.get(ENV_FAILURE_TIMEOUT, "").strip()
        try:
            timeout = float(value) if value else DEFAULT_FAILURE_TIMEOUT
        except ValueError:
            raise ValueError(
                f"jaxmg: {ENV_FAILURE_TIMEOUT}={value!r} is not a number of seconds; "
                f"set it to e.g. {DEFAULT_FAILURE_TIMEOUT:g} or unset it."
            ) from None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"jaxmg: timeout must be a number of seconds (at least 4) or None, got {timeout!r}.")
    if not 4 <= timeout < math.inf:
        raise ValueError(
            f"jaxmg: the failure timeout must be at least 4 seconds, got {timeout:g}, and finite "
            f"(argument timeout or {ENV_FAILURE_TIMEOUT}); JAX's heartbeats need a "
            "few seconds."
        )
    import inspect

    import jax

    accepted = inspect.signature(jax.distributed.initialize).parameters
    settings = {"heartbeat_timeout_seconds": int(timeout // 2)}
    return {name: value for name, value in settings.items() if name in accepted}


def initialize_from_environment() -> bool:
    """Initialize ``jax.distributed`` from the ``JAXMG_*`` variables, before any JAX computation.

    Does nothing (without importing JAX) when ``JAXMG_COORDINATOR`` is unset, or when
    ``jax.distributed`` is already initialized. On CPU it first sets ``jax_platforms="cpu"``,
    ``jax_cpu_collectives_implementation="gloo"`` and ``jax_num_cpu_devices=1``.

    Returns:
      True if this call initialized ``jax.distributed``, else False.
    """
    global _initialized_here
    coordinator = os.environ.get(ENV_COORDINATOR)
    if not coordinator or _initialized_here:
        return False

    def _int_var(name: str) -> int:
        value = os.environ.get(name)
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise RuntimeError(
                f"jaxmg: {ENV_COORDINATOR} is set but {name}={value!r} is not an integer; "
                "these variables are set by `python -m jaxmg.launch`."
            ) from None

    num_processes = _int_var(ENV_NUM_PROCESSES)
    process_id = _int_var(ENV_PROCESS_ID)
    ids = os.environ.get(ENV_LOCAL_DEVICE_IDS, "").strip()
    try:
        local_device_ids = [int(x) for x in ids.split(",")] if ids else None
    except ValueError:
        raise RuntimeError(
            f"jaxmg: {ENV_LOCAL_DEVICE_IDS}={ids!r} is not a comma-separated list of integers."
        ) from None
    platform = os.environ.get(ENV_PLATFORM, "gpu").strip().lower()

    import jax

    if jax.distributed.is_initialized():
        return False
    try:
        if platform == "cpu":
            jax.config.update("jax_platforms", "cpu")
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.config.update("jax_num_cpu_devices", 1)
        _let_sigterm_stop_the_process(jax)
        jax.distributed.initialize(
            **failure_detection_settings(),
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
            cluster_detection_method="deactivate",  # ignore Slurm/MPI variables
            coordinator_bind_address=coordinator,
        )  # loopback only
    except RuntimeError as e:
        raise RuntimeError(
            f"jaxmg: could not initialize jax.distributed (process {process_id} of {num_processes}, "
            f"coordinator {coordinator}): {e}\nImport jaxmg (or call jaxmg.launch.initialize_from_environment()) "
            "before running any JAX computation, and do not call jax.distributed.initialize() yourself "
            "under jaxmg.launch."
        ) from e
    _initialized_here = True
    return True


def _let_sigterm_stop_the_process(jax) -> None:
    """Turn off JAX's preemption service, whose SIGTERM handler would keep a rank that the
    launcher stops alive until SIGKILL."""
    try:
        jax.config.update("jax_enable_preemption_service", False)
    except (AttributeError, KeyError, ValueError):
        pass  # a JAX without the option


# --- The launcher ---

_USAGE = (
    "%(prog)s [-h] [-n N] [--platform {auto,cpu,gpu}] [--port PORT] "
    "[--timeout SECONDS] [--grace SECONDS] [--] (script.py | -m module) [args ...]"
)
# Launcher options that take a separate value (`-n 4`): where the target command begins.
_VALUE_OPTIONS = ("-n", "--nproc", "--port", "--platform", "--timeout", "--grace")


def simulate_cpu_devices_without_gpu(count: int = 8) -> None:
    """Make a script that would use GPUs run on ``count`` simulated CPU devices instead.

    Call before JAX starts its backend (before the first computation). Does nothing when GPUs
    are visible or inside a launched process, except that launched CPU processes and simulated
    devices run OpenBLAS single-threaded (every device makes its own LAPACK calls).
    """
    if ENV_PROCESS_ID in os.environ:
        if os.environ.get(ENV_PLATFORM) == "cpu":
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        return
    if _visible_gpu_count() > 0:
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxmg-launch",
        usage=_USAGE,
        allow_abbrev=False,
        description="Start N JAX processes on this host, one per device, connected through jax.distributed.",
        epilog="Launched processes initialize jax.distributed when they import jaxmg. "
        "See the docstring of jaxmg.launch for details.",
    )
    p.add_argument(
        "-n",
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="number of processes (default on GPU: one per visible GPU)",
    )
    p.add_argument(
        "--platform",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="device kind; auto = gpu if nvidia-smi finds a GPU, else cpu",
    )
    p.add_argument("--port", type=int, default=None, help="coordinator port on 127.0.0.1 (default: a free port)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"stop everything and exit {TIMEOUT_EXIT_CODE} after SECONDS",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"seconds between SIGTERM and SIGKILL when stopping processes (default {DEFAULT_GRACE:g})",
    )
    return p


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split argv into (launcher options, target) at the script or -m."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1 :]
        if a == "-m" or (a.startswith("-m") and not a.startswith("--")):
            break
        if not a.startswith("-") or a == "-":
            break
        i += 2 if a in _VALUE_OPTIONS else 1
    return argv[:i], argv[i:]


#: Runs each rank's target (see jaxmg/_rank_main.py): started by its path, so that neither
#: jaxmg nor JAX is imported before the target; a failing target exits at once.
_RANK_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank_main.py")


def _target_command(parser: argparse.ArgumentParser, target: list[str]) -> list[str]:
    if not target:
        parser.error("missing script: give a script path or -m module to run")
    first = target[0]
    if first == "-m":
        if len(target) < 2:
            parser.error("argument -m: expected a module name")
        return [sys.executable, _RANK_MAIN, "-m", target[1], *target[2:]]
    if first.startswith("-m"):
        return [sys.executable, _RANK_MAIN, "-m", first[2:], *target[1:]]
    if not os.path.isfile(first):
        parser.error(f"script not found: {first}")
    return [sys.executable, _RANK_MAIN, *target]


def _visible_gpu_count() -> int:
    """Count GPUs this process may use, without importing JAX or CUDA."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    # CUDA ignores everything from the first invalid entry on ("-1", "").
    valid = lambda entry: entry.strip() and not entry.strip().startswith("-")  # noqa: E731
    limit = None if cvd is None else len(list(itertools.takewhile(valid, cvd.split(","))))
    if limit == 0:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return 0
    if out.returncode != 0:
        return 0
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return count if limit is None else min(count, limit)


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _child_env(rank: int, nproc: int, coordinator: str, platform: str, stamp: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        **CHILD_ENV,
        ENV_COORDINATOR: coordinator,
        ENV_NUM_PROCESSES: str(nproc),
        ENV_PROCESS_ID: str(rank),
        ENV_PLATFORM: platform,
    }
    if stamp is not None:
        env[ENV_FAILURE_STAMP] = stamp
    if platform == "gpu":
        env[ENV_LOCAL_DEVICE_IDS] = str(rank)
    else:
        env.pop(ENV_LOCAL_DEVICE_IDS, None)
        env["JAX_PLATFORMS"] = "cpu"
        # N processes share the host's cores: OpenBLAS's own spinning threads would fight.
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def _die_with_parent():
    """preexec_fn factory: the child gets SIGKILL when the launcher dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 == PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the launcher died before prctl
            os._exit(1)

    return preexec


#: Lines of a failed rank's stderr repeated in the launcher's report.
TAIL_LINES = 20


#: A line that starts what JAX's coordination client writes when the service stops before a
#: peer's watch of it ends (at every normal exit of a multi-process run): not the program's.
_SHUTDOWN_NOISE_START = re.compile(rb"^[WE]\d{4} [\d:.]+\s+\d+ \S+\] WatchTasksAsync failed for task \d+")
#: The lines that follow it: gRPC's details, its status line and a source trace.
_SHUTDOWN_NOISE_REST = re.compile(
    rb"^(Additional GRPC error information from remote target .*|:[A-Z_]+:.*"
    rb"|=== Source Location Trace: ===\s*|external/\S+:\d+|\s*)$"
)
#: Gloo's line on each connection of the CPU collectives: not the program's either.
_GLOO_CONNECTED = re.compile(
    rb"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. "
    rb"Expected number of connected peer ranks is : \d+$"
)


class _NoiseFilter:
    """Drops, line by line, the shutdown and connection messages of JAX's runtime that every
    multi-process run prints (``_SHUTDOWN_NOISE_START`` and the block after it, and
    ``_GLOO_CONNECTED``), so that a clean run shows only the program's own output.
    ``JAXMG_LAUNCH_RAW=1`` passes everything on."""

    def __init__(self):
        self.in_block = False
        self.off = os.environ.get("JAXMG_LAUNCH_RAW", "") == "1"

    def keep(self, line: bytes) -> bool:
        if self.off:
            return True
        text = line.rstrip(b"\r\n")
        if _SHUTDOWN_NOISE_START.match(text):
            self.in_block = True
            return False
        if self.in_block and _SHUTDOWN_NOISE_REST.match(text):
            return False
        self.in_block = False
        return not _GLOO_CONNECTED.match(text)


def _pump(src, dst, prefix: bytes, lock: threading.Lock, tail: collections.deque | None = None) -> None:
    """Copy lines from a child's pipe to dst, each prefixed by its rank, without the runtime's
    noise (``_NoiseFilter``); keep the last in tail."""
    out = getattr(dst, "buffer", None)
    noise = _NoiseFilter()
    with src:
        for line in iter(src.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            if not noise.keep(line):
                continue
            if tail is not None:
                tail.append(line)
            with lock:
                try:
                    if out is not None:
                        out.write(prefix + line)
                    else:
                        dst.write((prefix + line).decode(errors="replace"))
                    dst.flush()
                except (OSError, ValueError):
                    pass  # our own output is gone; keep draining the child


def _say(msg: str, lock: threading.Lock) -> None:
    with lock:
        try:
            sys.stderr.write(f"[jaxmg.launch] {msg}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the child and anything it started
    except (ProcessLookupError, PermissionError):
        pass


def _describe(returncode: int) -> str:
    """'exited with status 3' or 'was killed by signal 9 (SIGKILL)'."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = f" ({signal.Signals(-returncode).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-returncode}{name}"


class _Failures:
    """Which rank failed first: each rank's runner stamps the time its target failed in a file
    of ``stamps``; ``exits`` receives (rank, returncode, time seen) as the ranks end; ``tails``
    keep the last lines of each rank's stderr for the report."""

    def __init__(self, exits, tails, lock):
        self.exits, self.tails, self.lock = exits, tails, lock
        self.stamps = tempfile.mkdtemp(prefix="jaxmg-launch-")

    def stamp(self, rank: int) -> str:
        return os.path.join(self.stamps, f"rank{rank}")

    def _failed_at(self, rank: int, seen: float) -> tuple[int, float]:
        """A key that orders failures by when they happened: (1, its runner's stamp of when its
        target failed), or (0, when its end was seen) for a rank killed by a signal (no stamp):
        its death comes before the failures of peers in the collectives it broke."""
        try:
            with open(self.stamp(rank)) as f:
                return 1, float(f.read())
        except (OSError, ValueError):
            return 0, seen

    def first(self, rank: int, rc: int, seen: float) -> tuple[int, int]:
        """(rank, returncode) of the rank that failed first: the failure just seen, or one of the
        ranks that failed with it (within SETTLE_SECONDS), by the time each failed."""
        failed = [(self._failed_at(rank, seen), rank, rc)]
        end = time.monotonic() + SETTLE_SECONDS
        while (left := end - time.monotonic()) > 0:
            try:
                other, other_rc, other_seen = self.exits.get(timeout=left)
            except queue.Empty:
                break
            if other_rc != 0:
                failed.append((self._failed_at(other, other_seen), other, other_rc))
        _, rank, rc = min(failed)
        return rank, rc

    def report(self, rank: int, returncode: int) -> None:
        """Say which rank failed first, how, and the last lines of its stderr."""
        tail = b"".join(self.tails[rank]).decode(errors="replace").rstrip("\n")
        lines = [f"rank {rank} failed first: it {_describe(returncode)}; stopping the other ranks"]
        if tail:
            lines.append(f"last lines of rank {rank}'s stderr:")
            lines += [f"  | {line}" for line in tail.splitlines()]
        else:
            lines.append(f"rank {rank} wrote nothing to stderr")
        _say("\n".join(lines), self.lock)


def _stop_all(procs, grace: float) -> None:
    """SIGTERM to every rank still running, SIGKILL after the grace period; wait for all."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in live) and time.monotonic() < deadline:
        time.sleep(0.02)
    for p in procs:
        # Also reaches processes the ranks started in their groups.
        _signal_group(p, signal.SIGKILL)
    for p in procs:
        p.wait()


def _start_ranks(run: _Run) -> None:
    """Start every rank (own process group), then one output pump per stream and one waiter per rank."""
    preexec = _die_with_parent()
    for rank in range(run.nproc):
        run.procs.append(
            subprocess.Popen(
                run.cmd,
                env=_child_env(rank, run.nproc, run.coordinator, run.platform, run.failures.stamp(rank)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group, for killpg
                preexec_fn=preexec,
            )
        )
    # Threads only after all forks (preexec_fn and threads don't mix).
    for rank, p in enumerate(run.procs):
        prefix = f"[rank {rank}] ".encode()
        tail = collections.deque(maxlen=TAIL_LINES)
        run.tails.append(tail)
        for src, dst, keep in ((p.stdout, sys.stdout, None), (p.stderr, sys.stderr, tail)):
            run._thread(_pump, src, dst, prefix, run.lock, keep, name=f"rank{rank}-output")
        run._thread(run._await_exit, rank, p, name=f"rank{rank}-wait")


class _Run:
    def __init__(self, cmd: list[str], nproc: int, platform: str, port: int, timeout: float | None, grace: float):
        self.cmd, self.nproc, self.platform = cmd, nproc, platform
        self.coordinator = f"127.0.0.1:{port}"
        self.timeout, self.grace = timeout, grace
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.signals: list[int] = []
        # (rank, returncode, time seen) as the ranks end; one waiter thread per rank.
        self.exits: queue.Queue[tuple[int, int, float]] = queue.Queue()
        self.tails: list[collections.deque] = []
        self.failures = _Failures(self.exits, self.tails, self.lock)

    # Signal handler (main thread): forward the first signal, kill on the second.
    def _on_signal(self, signum, frame) -> None:
        self.signals.append(signum)
        sig = signum if len(self.signals) == 1 else signal.SIGKILL
        for p in self.procs:
            if p.poll() is None:
                _signal_group(p, sig)

    def _thread(self, target, *args, name: str) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name=f"jaxmg-launch-{name}")
        t.start()
        self.threads.append(t)

    def _await_exit(self, rank: int, p: subprocess.Popen) -> None:
        rc = p.wait()
        self.exits.put((rank, rc, time.time()))

    def _wait(self) -> int:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        running = self.nproc
        while True:
            if self.signals:
                _say(f"received {signal.Signals(self.signals[0]).name}; stopping all ranks", self.lock)
                _stop_all(self.procs, self.grace)
                return 128 + self.signals[0]
            if not running:
                return 0
            if deadline is not None and time.monotonic() > deadline:
                _say(f"timeout after {self.timeout:g} s; stopping all ranks", self.lock)
                _stop_all(self.procs, self.grace)
                _say(f"all ranks stopped {time.monotonic() - deadline:.1f} s after the timeout", self.lock)
                return TIMEOUT_EXIT_CODE
            try:
                rank, rc, seen = self.exits.get(timeout=0.05)
            except queue.Empty:
                continue
            running -= 1
            if rc != 0 and not self.signals:  # else ended by the signal we forwarded, reported above
                failed_at = time.monotonic()
                rank, rc = self.failures.first(rank, rc, seen)
                self.failures.report(rank, rc)
                _stop_all(self.procs, self.grace)
                _say(f"all ranks stopped {time.monotonic() - failed_at:.1f} s after rank {rank} ended", self.lock)
                return 128 - rc if rc < 0 else rc

    def run(self) -> int:
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            _start_ranks(self)
            code = self._wait()
        except BaseException:
            _stop_all(self.procs, self.grace)
            raise
        finally:
            for sig, h in handlers.items():
                signal.signal(sig, h)
            shutil.rmtree(self.failures.stamps, ignore_errors=True)
        for t in self.threads:
            t.join(timeout=2.0)  # a detached grandchild may hold a pipe open
        return code


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    options, target = _split_argv(argv)
    args = parser.parse_args(options)

    if args.nproc is not None and args.nproc < 1:
        parser.error(f"-n/--nproc must be at least 1, got {args.nproc}")
    if args.port is not None and not 0 < args.port < 65536:
        parser.error(f"--port must be in 1..65535, got {args.port}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")
    if args.grace < 0:
        parser.error(f"--grace must be non-negative, got {args.grace:g}")
    cmd = _target_command(parser, target)

    platform = args.platform
    gpus = 0 if platform == "cpu" else _visible_gpu_count()
    if platform == "auto":
        platform = "gpu" if gpus > 0 else "cpu"
    nproc = args.nproc
    if nproc is None:
        if platform == "cpu" or gpus == 0:
            parser.error("-n/--nproc is required when no GPU is detected")
        nproc = gpus
    if platform == "gpu" and 0 < gpus < nproc:
        parser.error(f"-n {nproc} needs {nproc} GPUs but {gpus} are visible (use --platform cpu for CPU processes)")

    port = args.port if args.port is not None else _free_port()
    return _Run(cmd, nproc, platform, port, args.timeout, args.grace).run()


if __name__ == "__main__":
    sys.exit(main())
