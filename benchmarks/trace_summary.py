"""Where the time of one traced call goes: a summary of a jax.profiler Perfetto trace.

    python benchmarks/trace_summary.py TRACE.json.gz [--top 25]

``bench_potrs.py --profile DIR`` traces one extra (untimed) call per size and process with
``jax.profiler`` (``create_perfetto_trace=True``). This script reads such a
``perfetto_trace.json.gz`` and prints, for each process/thread track of the trace (host threads,
GPU streams), its busy time and its longest events, merged by name: total duration, count and the
share of the track's span. Comparing the GPU stream tracks with the handler's own timings
(``solver_ms``, ``layout_ms``) shows which kernels or gaps make up the rest of the call.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json


def load(path: str) -> list[dict]:
    """The trace's events (a Perfetto/Chrome JSON trace, gzipped or not)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def tracks(events: list[dict]) -> dict:
    """(process name, thread name) -> the complete ('X') events on that track."""
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[(e["name"], e["pid"], e.get("tid"))] = e["args"]["name"]
    out = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            process = names.get(("process_name", e["pid"], None), str(e["pid"]))
            thread = names.get(("thread_name", e["pid"], e.get("tid")), str(e.get("tid")))
            out[(process, thread)].append(e)
    return out


def summary(events: list[dict], top: int = 25) -> list[str]:
    """Lines of the summary: one block per track, its span, and its longest events by name."""
    lines = []
    for (process, thread), evs in sorted(tracks(events).items()):
        start = min(e["ts"] for e in evs)
        span = max(e["ts"] + e["dur"] for e in evs) - start
        by_name = collections.defaultdict(lambda: [0.0, 0])
        for e in evs:
            by_name[e["name"]][0] += e["dur"]
            by_name[e["name"]][1] += 1
        lines.append(f"== {process} / {thread}: {len(evs)} events over {span / 1e3:.3f} ms")
        for name, (dur, count) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
            share = dur / span if span else 0.0
            lines.append(f"   {dur / 1e3:10.3f} ms  {count:6d}x  {share:6.1%}  {name[:110]}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    print("\n".join(summary(load(a.trace), a.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
