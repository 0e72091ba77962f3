"""Test set-up: 8 simulated CPU devices (unless GPUs run the suite) and float64 enabled."""

import os

_FLAGS = os.environ.get("XLA_FLAGS", "")
if "JAXMG_PROCESS_ID" not in os.environ and "xla_force_host_platform_device_count" not in _FLAGS:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
# The tests' matrices are tiny and most of their time is XLA compiling: LLVM's cheaper
# optimisation level compiles about 15% faster with the same results (unless XLA_FLAGS sets it).
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    ).strip()

# 8 simulated devices each call OpenBLAS on 2 cores: its spinning worker threads make that
# 100x slower on a busy machine (measured), so each call runs on its own thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jaxtyping  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def library_errors():
    """For tests of jaxmg's own errors on input that its annotations reject as well: the run-time
    annotation checks of the suite (jaxtyping's, pyproject.toml's pytest options) off for the test,
    so that the error raised is jaxmg's, with its message that names the argument and the fix
    (what users see: they run without those checks)."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", before)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The cases of each parametrized test alternate between the quick run and the slow one: of
    the cases not already marked slow, the 2nd, 4th, ... (in collection order) are marked slow.
    ``bash tests/run.sh`` then runs every test function on half its cases (the first always),
    ``bash tests/run.sh --slow`` the other half, and CI (``.ci/run``) both: every case."""
    del config
    quick: dict[str, int] = {}
    for item in items:
        if getattr(item, "callspec", None) is None or item.get_closest_marker("slow") is not None:
            continue
        function = item.nodeid.split("[", 1)[0]
        if quick.get(function, 0) % 2:
            item.add_marker(pytest.mark.slow)
        quick[function] = quick.get(function, 0) + 1
