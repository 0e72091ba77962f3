"""Tests of jaxmg.launch, the single-host multi-process launcher (CPU only).

Every launch runs in a subprocess with a timeout (and the launcher's own
--timeout), so a broken launcher fails the test instead of hanging it.
"""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "launch_scripts"

if importlib.util.find_spec("jaxmg") is None:  # not installed: use the source tree
    sys.path.insert(0, str(ROOT))

from jaxmg import launch  # noqa: E402

# Launched processes import jaxmg from where this test did.
JAXMG_PARENT = Path(launch.__file__).resolve().parents[1]


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(JAXMG_PARENT), str(SCRIPTS)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    for var in list(env):
        if var.startswith("JAXMG_"):
            del env[var]
    env.update(extra)
    return env


def _launch(*args, timeout=60, **env):
    """Run `python -m jaxmg.launch ARGS` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "jaxmg.launch", *map(str, args)],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pids(pid_dir, n, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        files = sorted(Path(pid_dir).glob("rank*.pid"))
        if len(files) == n and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"ranks did not start: {list(Path(pid_dir).iterdir())}")


def _assert_all_gone(pids, timeout=2):
    deadline = time.monotonic() + timeout
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [p for p in pids if _alive(p)]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, f"rank processes still running: {alive}"


# ---------------------------------------------------------------------------
# Multi-process JAX on CPU
# ---------------------------------------------------------------------------


def test_four_process_cpu_collective():
    # XLA_FLAGS asks for 8 host devices; the launcher must still give 1 each.
    r = _launch(
        "-n",
        4,
        "--platform",
        "cpu",
        "--timeout",
        90,
        SCRIPTS / "collective.py",
        timeout=120,
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(4):
        assert f"[rank {rank}] psum=10\n" in r.stdout, r.stdout + r.stderr
        assert f"[rank {rank}] allgather=[0, 10, 20, 30]\n" in r.stdout
        assert f"[rank {rank}] to stderr\n" in r.stderr
    # Nothing unprefixed from the ranks.
    for line in r.stdout.splitlines():
        assert line.startswith("[rank "), line


def test_jax_used_before_initialize_fails_clearly():
    r = _launch("-n", 1, "--platform", "cpu", "--timeout", 60, SCRIPTS / "jax_too_early.py")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[rank 0] RuntimeError: jaxmg: could not initialize jax.distributed" in r.stderr
    assert "[jaxmg.launch] rank 0 failed first: it exited with status 1" in r.stderr


# ---------------------------------------------------------------------------
# Faults in JAX ranks: every process stops within STOP_BOUND s of the first failure
# ---------------------------------------------------------------------------

# The bound is 10 s; the launcher takes well under 1 s (see the README). Measured from
# the failing rank's own clock to the launcher's exit, on a loaded 2-core machine.
STOP_BOUND = 10.0


def _launch_fault(tmp_path, mode, failing_rank, *options):
    """Launch tests/launch_scripts/fault.py on 2 CPU processes; return (result, seconds
    from the failure to the launcher's exit, rank pids)."""
    r = _launch(
        "-n",
        2,
        "--platform",
        "cpu",
        "--timeout",
        240,
        *options,
        SCRIPTS / "fault.py",
        mode,
        failing_rank,
        tmp_path,
        timeout=300,
    )
    ended = time.time()
    failed_at = float((tmp_path / "failed_at").read_text())
    print(r.stderr[-3000:], f"\n{mode}: all ranks stopped {time.time() - failed_at:.1f} s after the failure")
    return r, ended - failed_at, _pids(tmp_path, 2, timeout=0)


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "mode, rank, status, cause",
    [
        # rank 1 raises while rank 0 waits for it in a gloo all-reduce (302 s, "rank 0
        # exited with status 134"; now about 1 s and rank 1)
        ("raise-in-collective", 1, 1, "ValueError: rank 1 fails on purpose"),
        # rank 1 raises before any collective (33 s)
        ("raise-early", 1, 1, "ValueError: rank 1 fails on purpose"),
        # the coordinator's rank calls sys.exit(7) while rank 1 waits in a collective
        ("exit-in-collective", 0, 7, None),
        # rank 1 dies of SIGKILL while rank 0 waits in a collective
        ("kill-in-collective", 1, 128 + 9, None),
    ],
)
def test_first_failure_stops_every_rank(tmp_path, mode, rank, status, cause):
    r, seconds, pids = _launch_fault(tmp_path, mode, rank)
    assert r.returncode == status, r.stdout[-3000:] + r.stderr[-3000:]
    how = "was killed by signal 9 (SIGKILL)" if status > 128 else f"exited with status {status}"
    assert f"[jaxmg.launch] rank {rank} failed first: it {how}" in r.stderr, r.stderr[-3000:]
    report = r.stderr[r.stderr.index("[jaxmg.launch]") :]
    if cause:
        assert f"last lines of rank {rank}'s stderr:" in report
        assert f"  | {cause}" in report, report
        assert "fault.py" in report and "runpy" not in report, report
    assert seconds < STOP_BOUND, f"stopped {seconds:.1f} s after the failure"
    _assert_all_gone(pids)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_timeout_stops_ranks_blocked_in_a_collective(tmp_path):
    # Rank 1 sleeps while rank 0 waits for it in an all-reduce (--timeout 15 took
    # 21 s, since JAX's preemption service swallowed SIGTERM and only SIGKILL after the
    # 5-s grace period stopped the ranks).
    start = time.monotonic()
    r = _launch("-n", 2, "--platform", "cpu", "--timeout", 15, SCRIPTS / "fault.py", "hang", 1, tmp_path, timeout=120)
    elapsed = time.monotonic() - start
    print(r.stderr[-1000:], f"launcher ran {elapsed:.1f} s")
    assert r.returncode == 124, r.stdout[-3000:] + r.stderr[-3000:]
    assert "timeout after 15 s" in r.stderr
    stopped = float(r.stderr.split("all ranks stopped ")[1].split(" s after the timeout")[0])
    assert stopped < 2.0, stopped  # SIGTERM works: no wait for the SIGKILL of the grace period
    assert elapsed < 15 + 2.0 + 10, elapsed  # + stop + the launcher's own start
    _assert_all_gone(_pids(tmp_path, 2, timeout=0))


# ---------------------------------------------------------------------------
# Process management (no JAX in the ranks: fast)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ignore_sigterm", [False, True])
def test_failing_rank_stops_the_others(tmp_path, ignore_sigterm):
    args = ["-n", 3, "--platform", "cpu", "--timeout", 50, "--grace", 1, SCRIPTS / "fail.py", tmp_path]
    if ignore_sigterm:  # needs SIGKILL after the grace period
        args.append("--ignore-sigterm")
    start = time.monotonic()
    r = _launch(*args)
    elapsed = time.monotonic() - start
    assert r.returncode == 3, r.stdout + r.stderr
    assert elapsed < 15, elapsed
    assert "[jaxmg.launch] rank 1 failed first: it exited with status 3" in r.stderr
    for rank in range(3):
        assert f"[rank {rank}] started" in r.stdout
    _assert_all_gone(_pids(tmp_path, 3, timeout=0))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_forwarded(tmp_path, sig):
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jaxmg.launch",
            "-n",
            "2",
            "--platform",
            "cpu",
            "--timeout",
            "50",
            "--grace",
            "2",
            str(SCRIPTS / "sleep.py"),
            str(tmp_path),
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        pids = _pids(tmp_path, 2)
        time.sleep(0.3)  # let the ranks reach their sleep
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 128 + sig, out + err
    assert f"received {signal.Signals(sig).name}" in err
    _assert_all_gone(pids)


def test_timeout_kills_everything(tmp_path):
    r = _launch("-n", 2, "--platform", "cpu", "--timeout", 1, "--grace", 1, SCRIPTS / "sleep.py", tmp_path)
    assert r.returncode == 124, r.stdout + r.stderr
    assert "timeout after 1 s" in r.stderr
    _assert_all_gone(_pids(tmp_path, 2, timeout=0))


def test_script_arguments_module_and_prefixes():
    r = _launch(
        "-n", 2, "--platform", "cpu", "--timeout", 30, "--", SCRIPTS / "echo_args.py", "-n", "5", "--timeout", "x"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert (f"[rank {rank}] rank={rank} of 2 platform=cpu args=['-n', '5', '--timeout', 'x']\n") in r.stdout
        assert f"[rank {rank}] no newline\n" in r.stderr

    r = _launch("--nproc=3", "--platform", "cpu", "-m", "echo_args", "--platform", "y")
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert f"[rank {rank}] rank={rank} of 3 platform=cpu args=['--platform', 'y']" in r.stdout


#: A target's last line -> the exit status of its rank and what its stderr shows.
ENDINGS = {
    "raise ValueError('boom')": (1, "ValueError: boom"),
    "sys.exit(5)": (5, ""),
    "sys.exit('bad thing')": (1, "bad thing"),
    "sys.exit(0)": (0, ""),
    "pass": (0, ""),
}


@pytest.mark.parametrize("body", ENDINGS)
def test_rank_main_ends_a_failed_rank_at_once(tmp_path, body):
    # A failed target skips the exit handlers (jax.distributed.shutdown's barrier among them);
    # a successful one runs them. The traceback shows the script's frames, not the runner's.
    status, stderr = ENDINGS[body]
    script = tmp_path / "target.py"
    script.write_text(
        "import atexit, sys\n"
        "atexit.register(lambda: print('exit handlers ran'))\n"
        f"assert sys.argv[1:] == ['x'] and __name__ == '__main__'\n{body}\n"
    )
    r = subprocess.run(
        [sys.executable, launch._RANK_MAIN, str(script), "x"], env=_env(), capture_output=True, text=True, timeout=30
    )
    assert r.returncode == status, r.stderr
    assert ("exit handlers ran" in r.stdout) == (status == 0), r.stdout
    assert stderr in r.stderr
    if "Error" in stderr:
        assert 'target.py", line 4, in <module>' in r.stderr and "runpy" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------
# Argument errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-n", "0", "--platform", "cpu", "x.py"], "-n/--nproc must be at least 1"),
        (["-n", "-2", "--platform", "cpu", "x.py"], "-n/--nproc must be at least 1"),
        (["-n", "2", "--platform", "cpu"], "missing script"),
        (["-n", "2", "--platform", "cpu", "--"], "missing script"),
        (["-n", "2", "--platform", "cpu", "no_such_script.py"], "script not found"),
        (["-n", "2", "-m"], "expected a module name"),
        (["--platform", "cpu", str(SCRIPTS / "sleep.py")], "-n/--nproc is required"),
        (["-n", "2", "--platform", "tpu", "x.py"], "invalid choice"),
        (["-n", "2", "--timeout", "0", "x.py"], "--timeout must be positive"),
        (["-n", "2", "--bogus", "x.py"], "unrecognized arguments: --bogus"),
    ],
)
def test_argument_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        launch.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "usage: jaxmg-launch" in err


def test_argument_error_from_command_line():
    r = _launch("-n", 0, "--platform", "cpu", "x.py", timeout=30)
    assert r.returncode == 2
    assert "-n/--nproc must be at least 1" in r.stderr


def test_split_argv():
    split = launch._split_argv
    assert split(["-n", "2", "s.py", "-n", "3"]) == (["-n", "2"], ["s.py", "-n", "3"])
    assert split(["-n2", "--port=5", "--", "-x.py", "a"]) == (["-n2", "--port=5"], ["-x.py", "a"])
    assert split(["--nproc", "2", "-m", "pkg.mod", "-n"]) == (["--nproc", "2"], ["-m", "pkg.mod", "-n"])
    assert split(["-n", "2", "-mpkg", "a"]) == (["-n", "2"], ["-mpkg", "a"])
    assert split(["-n", "2"]) == (["-n", "2"], [])


# ---------------------------------------------------------------------------
# GPU detection and child environment (no GPU needed)
# ---------------------------------------------------------------------------


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(
        "#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-0)'\n"
        "echo '  MIG 1g.10gb Device 0: (UUID: MIG-0)'\n"
        "echo 'GPU 1: Fake (UUID: GPU-1)'\n"
    )
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_gpu_count(fake_nvidia_smi, monkeypatch):
    assert launch._visible_gpu_count() == 2
    for cvd, expected in [("1", 1), ("0,1,2", 2), ("", 0), ("-1", 0), ("0,-1,1", 1)]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
        assert launch._visible_gpu_count() == expected, cvd


def test_gpu_count_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert launch._visible_gpu_count() == 0


def test_too_many_processes_for_gpus(fake_nvidia_smi, capsys):
    with pytest.raises(SystemExit):
        launch.main(["-n", "3", str(SCRIPTS / "sleep.py")])
    assert "needs 3 GPUs but 2 are visible" in capsys.readouterr().err


def test_child_env(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    gpu = launch._child_env(1, 2, "127.0.0.1:1234", "gpu")
    assert gpu["JAXMG_COORDINATOR"] == "127.0.0.1:1234"
    assert gpu["JAXMG_NUM_PROCESSES"] == "2"
    assert gpu["JAXMG_PROCESS_ID"] == "1"
    assert gpu["JAXMG_LOCAL_DEVICE_IDS"] == "1"
    assert gpu["JAXMG_PLATFORM"] == "gpu"
    assert gpu["CUDA_VISIBLE_DEVICES"] == "0,1"  # not narrowed
    for var, value in [
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
        ("PYTHONUNBUFFERED", "1"),
    ]:
        assert gpu[var] == value
    cpu = launch._child_env(0, 4, "127.0.0.1:1234", "cpu")
    assert cpu["JAXMG_PLATFORM"] == "cpu" and cpu["JAX_PLATFORMS"] == "cpu"
    assert "JAXMG_LOCAL_DEVICE_IDS" not in cpu


# ---------------------------------------------------------------------------
# initialize_from_environment outside the launcher
# ---------------------------------------------------------------------------


def test_initialize_without_launcher_is_a_cheap_no_op():
    # Load launch.py on its own, so that whatever jaxmg/__init__.py imports
    # does not count.
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('l', {str(Path(launch.__file__))!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert m.initialize_from_environment() is False\n"
        "assert m.initialize_from_environment() is False\n"
        "assert 'jax' not in sys.modules, 'jax was imported'\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


def test_launch_module_imports_no_jax():
    spec = importlib.util.find_spec("jaxmg.launch")
    src = Path(spec.origin).read_text()
    top_level_imports = [line for line in src.splitlines() if line.startswith(("import ", "from "))]
    assert not any("jax" in line for line in top_level_imports), top_level_imports


# ---------------------------------------------------------------------------
# Without the launcher (as under Slurm or mpirun): a survivor of a dead rank fails in time
# ---------------------------------------------------------------------------

FAILURE_TIMEOUT = 10  # JAXMG_FAILURE_TIMEOUT for these tests (default 60); heartbeat 5 s


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "init, dead, mode",
    [
        ("jaxmg", 1, "kill-in-collective"),
        ("jax", 1, "kill-in-collective"),
        ("jaxmg", 0, "kill-in-collective"),
        ("jaxmg", 1, "kill-in-solve"),
    ],
)
def test_survivor_of_a_dead_rank_fails_in_time(tmp_path, init, dead, mode):
    """Two plain processes (no launcher); `dead` is SIGKILLed while its peer is in an all-reduce
    (kill-in-collective) or in jaxmg.potrs (kill-in-solve).

    init: "jaxmg" joins through initialize_from_environment (JAXMG_* variables set by hand),
    "jax" calls jax.distributed.initialize(..., **failure_detection_settings()) itself.
    """
    from helpers import run_ranks_without_launcher

    status, out, seconds, dead_status = run_ranks_without_launcher(
        mode, dead, tmp_path, init=init, env={"JAXMG_FAILURE_TIMEOUT": str(FAILURE_TIMEOUT)}
    )
    fatal = [
        line
        for line in out.splitlines()
        if "Terminating process" in line or "heartbeat" in line or "Socket closed" in line
    ]
    print(
        f"survivor (rank {1 - dead}) ended {seconds:.1f} s after rank {dead} died, status {status}:",
        *fatal[:6],
        sep="\n",
    )
    assert dead_status == -signal.SIGKILL
    assert status != 0, out[-3000:]
    assert seconds < FAILURE_TIMEOUT, f"{seconds:.1f} s\n{out[-3000:]}"
    assert "Terminating process because the JAX distributed service detected fatal errors" in out, out[-3000:]
    if dead == 1:  # the coordination service (in rank 0) names the dead task
        assert "Task 1 heartbeat timeout" in out or "stopped sending heartbeats):\n1" in out, out[-3000:]
    else:  # the coordination service itself died with rank 0: the survivor's RPCs to it fail,
        # in gRPC's words of the moment ("Socket closed", or "Connection reset by peer" when the
        # survivor's poll was in flight; or Gloo's, when its all-reduce noticed first)
        lost = (
            "Socket closed",
            "Connection reset by peer",
            "Stream removed",
            "Connection refused",
            "Connection closed by peer",
        )
        assert "coordination_service" in out and any(word in out for word in lost), out[-3000:]


@pytest.mark.parametrize("value, heartbeat", [(None, 30), ("20", 10), ("9", 4)])
def test_failure_detection_settings(monkeypatch, value, heartbeat):
    if value is None:
        monkeypatch.delenv("JAXMG_FAILURE_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("JAXMG_FAILURE_TIMEOUT", value)
    assert launch.failure_detection_settings() == {"heartbeat_timeout_seconds": heartbeat}
    assert launch.failure_detection_settings(60) == {"heartbeat_timeout_seconds": 30}


@pytest.mark.parametrize(
    "value, message",
    [
        ("soon", "JAXMG_FAILURE_TIMEOUT='soon' is not a number of seconds"),
        ("2", "must be at least 4 seconds, got 2"),
    ],
)
def test_failure_detection_settings_errors(monkeypatch, value, message):
    monkeypatch.setenv("JAXMG_FAILURE_TIMEOUT", value)
    with pytest.raises(ValueError, match=message):
        launch.failure_detection_settings()


@pytest.mark.parametrize(
    "timeout, error, message",
    [("60", TypeError, "timeout must be a number of seconds"), (float("inf"), ValueError, "got inf, and finite")],
)
@pytest.mark.usefixtures("library_errors")
def test_failure_detection_settings_names_a_bad_timeout(timeout, error, message):
    """A timeout that is not a number, or is infinite, is named (not a comparison's TypeError or an
    integer conversion's ValueError)."""
    with pytest.raises(error, match=message):
        launch.failure_detection_settings(timeout)


def test_first_failure_is_the_earliest_not_the_first_seen():
    """Ranks that end together (a failure and the peers whose collective it broke) are ordered by
    when they failed (the runners' stamps), a rank killed by a signal first; not by the order in
    which the launcher's waiter threads saw them end."""
    run = launch._Run(["true"], 3, "cpu", 1234, None, 1.0)
    try:
        for rank, when in ((0, 20.0), (1, 10.0)):
            with open(run.failures.stamp(rank), "w") as f:
                f.write(repr(when))
        run.exits.put((1, 1, 99.0))
        assert run.failures.first(0, 1, 98.0) == (1, 1)  # rank 0 was seen first, rank 1 failed first
        run.exits.put((2, -9, 99.0))  # killed: no stamp
        assert run.failures.first(0, 1, 98.0) == (2, -9)
    finally:
        shutil.rmtree(run.failures.stamps)


NOISE = (
    "CANCELLED",
    "WatchTasksAsync",
    "Cancelling all calls",
    "Source Location Trace",
    "GRPC error",
    "grpc_util",
    "[Gloo]",
)


def test_clean_run_prints_only_the_programs_output():
    """The coordination client's shutdown lines and Gloo's connection lines are not passed on."""
    r = _launch("-n", 2, "--platform", "cpu", "--timeout", 90, SCRIPTS / "quiet_exit.py", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(r.stdout.splitlines()) == ["[rank 0] solved 0.5", "[rank 1] solved 0.5"], r.stdout
    for rank in range(2):
        own = [line for line in r.stderr.splitlines() if line.startswith(f"[rank {rank}]")]
        assert own == [f"[rank {rank}] own stderr line", f"[rank {rank}] last own stderr line"], r.stderr
    assert not any(word in r.stdout + r.stderr for word in NOISE), r.stdout + r.stderr
