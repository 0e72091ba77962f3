"""Run one rank's target under ``jaxmg.launch``: ``python _rank_main.py (script.py | -m module) args...``.

The launcher starts this file by its path (so that the ``jaxmg`` package, and JAX, are not
imported before the target runs). It runs the target as ``__main__``, exactly as ``python
script.py`` or ``python -m module`` would, with one difference: when the target fails (an
uncaught exception, or ``sys.exit`` with a non-zero status) the process prints the traceback
and exits at once with ``os._exit``. It skips the interpreter's exit handlers, among them
``jax.distributed.shutdown``, whose barrier waits (up to 5 minutes) for peers that may be
blocked in a collective with the failed rank and never arrive. The launcher then sees the
failure within its poll interval and stops the other ranks. A successful target exits
normally, exit handlers included.

Standard library only: this file runs before anything else is imported.
"""

import sys

del sys.path[0]  # this file's folder, jaxmg/: nothing may be imported from there

import os  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

_HIDDEN = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}


def _user_frames(tb):
    """Drop this runner's and runpy's frames from the front of a traceback."""
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in _HIDDEN or os.path.abspath(tb.tb_frame.f_code.co_filename) in _HIDDEN
    ):
        tb = tb.tb_next
    return tb


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _stamp_failure() -> None:
    """Write when the target failed (``time.time()``) to the file the launcher named in
    ``JAXMG_FAILURE_STAMP``: the launcher names the rank that failed first by these times, not
    by the order in which it saw the ranks end (a peer of the failed rank can end within
    milliseconds of it, from the collective that the failure broke)."""
    path = os.environ.get("JAXMG_FAILURE_STAMP")
    if not path:
        return
    try:
        with open(path, "w") as f:
            f.write(repr(time.time()))
    except OSError:
        pass


def _exit_now(status: int) -> None:
    _flush()
    os._exit(status)


def _run(target: list[str]) -> None:
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]  # runpy sets argv[0] to the module's file
        sys.path.insert(0, os.getcwd())  # as `python -m` does
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(target)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target[0])))  # as `python script.py`
        runpy.run_path(target[0], run_name="__main__")


def main() -> None:
    if len(sys.argv) < 2 or (sys.argv[1] == "-m" and len(sys.argv) < 3):
        sys.exit("usage: _rank_main.py (script.py | -m module) [args ...]")
    try:
        _run(sys.argv[1:])
    except SystemExit as e:
        code = e.code
        if code is None or code == 0:
            raise  # a normal exit: run the exit handlers
        _stamp_failure()
        if not isinstance(code, int):
            print(code, file=sys.stderr)  # what the interpreter does with sys.exit("text")
            code = 1
        _exit_now(code & 0xFF or 1)
    except KeyboardInterrupt as e:
        _stamp_failure()
        traceback.print_exception(type(e), e, _user_frames(e.__traceback__))
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # report SIGINT, as Python does
        os.kill(os.getpid(), signal.SIGINT)
        _exit_now(128 + signal.SIGINT)
    except BaseException as e:  # noqa: BLE001 - every failure ends the rank now
        _stamp_failure()
        traceback.print_exception(type(e), e, _user_frames(e.__traceback__))
        _exit_now(1)


if __name__ == "__main__":
    main()
