"""Draws the performance page's plots and tables from the benchmark records.

Reads every ``*.jsonl`` under ``benchmarks/results/h200x2/`` (the two-H200 machine, one folder
per day) (one JSON object per timed case, as written by
``benchmarks/bench_potrs.py`` and ``benchmarks/bench_autodiff.py``) and writes into
``docs/generated/``:

- ``time_vs_n.png``: median time of a solve against N, one line per library/configuration;
- ``tflops_vs_n.png``: TFLOP/s (N^3/3 per Cholesky) against N, same lines;
- ``tile_size.png``: time against the tile size T_A at each N where several were measured;
- ``tables.md``: the same numbers as Markdown tables, and the derivative/vmap timings of
  ``bench_autodiff.py`` (included by docs/performance.md).

    python docs/plots.py [--results benchmarks/results/h200x2] [--out docs/generated]

Where one configuration was measured several times, the latest record wins (the files are
read by day, then by name, lines in file order; records from ``*-early.jsonl``, an earlier
version of the code measured the same day, are read first).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: record "kind" -> (label in plots and tables, line style)
LIBRARIES = {
    "jaxmg-native-api": ("jaxmg.potrs, 2 GPUs (public API)", "o-"),
    "jaxmg-native-kernel": ("jaxmg native kernel, 2 GPUs", "s--"),
    "jax-1gpu": ("plain JAX, 1 GPU (cho_factor + cho_solve)", "^:"),
}

#: bench_autodiff.py case -> what it times
AUTODIFF_CASES = {
    "potrs": "`potrs(A, b)`",
    "grad": "`jax.grad(sum(potrs(A, b)))` w.r.t. A and b",
    "factor+8solves": "`Cholesky(A)` + 8 solves",
    "potrs@vmap-n": "`potrs(A, b)` at the vmap size",
    "vmap4": "`jax.vmap(potrs)` over 4 systems",
}


def _older_first(path: Path):
    return (path.parent.name, 0 if "early" in path.stem else 1, path.name)


def load(results: Path) -> list[dict]:
    """Every record of every JSONL file under ``results``, oldest first, each with its file's
    path relative to ``results`` (``DATE/NAME.jsonl``)."""
    records = []
    for path in sorted(results.rglob("*.jsonl"), key=_older_first):
        for line in path.read_text().splitlines():
            if line.strip():
                records.append({**json.loads(line), "_file": path.relative_to(results).as_posix()})
    return records


def _grid(record) -> tuple:
    return tuple(record.get("grid") or (record.get("devices", 1), 1))


def latest(records: list[dict], key) -> dict:
    """The last record for each value of ``key(record)`` (None keys are dropped)."""
    out = {}
    for r in records:
        k = key(r)
        if k is not None:
            out[k] = r
    return out


def solve_series(records: list[dict]) -> dict:
    """label -> sorted [(N, record)]: potrs timings per library, at the automatic tile size
    (the public API's, or the kernel at the T_A that the API picks), grid (2, 1) for
    2 GPUs, plus the kernel on the (1, 2) grid."""
    from jaxmg._layout import LARGE_AUTO_TILE, LARGE_N, MAX_AUTO_TILE

    def auto(n):
        return LARGE_AUTO_TILE if n >= LARGE_N else MAX_AUTO_TILE

    def key(r):
        kind = r.get("kind")
        if kind not in LIBRARIES or r.get("dtype", "float64") != "float64":
            return None
        if kind == "jaxmg-native-kernel" and r.get("T_A") != auto(r["N"]):
            return None
        label = LIBRARIES[kind][0]
        if kind == "jaxmg-native-kernel":
            label += f", grid {_grid(r)[0]}x{_grid(r)[1]}"
        return label, r["N"]

    series: dict = {}
    for (label, n), r in latest(records, key).items():
        series.setdefault(label, []).append((n, r))
    return {label: sorted(points, key=lambda p: p[0]) for label, points in sorted(series.items())}


def tile_series(records: list[dict]) -> dict:
    """(N, file) -> sorted [(T_A, record)] for the native kernel on the (2, 1) grid, where
    one file (one version of the code) measured at least two tile sizes at that N: tile sizes
    are compared only within one file."""
    by_key = latest(records, lambda r: (r["N"], r["_file"], r["T_A"]) if r.get("kind") == "jaxmg-native-kernel"
                    and _grid(r) == (2, 1) else None)
    out: dict = {}
    for (n, file, tile), r in by_key.items():
        out.setdefault((n, file), []).append((tile, r))
    return {key: sorted(points, key=lambda p: p[0]) for key, points in sorted(out.items()) if len(points) > 1}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.3f} s"


def _style(label: str) -> str:
    for kind, (name, style) in LIBRARIES.items():
        if label.startswith(name):
            return style if "1x2" not in label else "d-."
    return "o-"


def plot(series: dict, tiles: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name, field, ylabel, logy in (("time_vs_n.png", "median_s", "median time per solve (s)", True),
                                      ("tflops_vs_n.png", "tflops", "TFLOP/s (N³/3 per factorisation)", False)):
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for label, points in series.items():
            xs = [n for n, r in points if r.get(field) is not None]
            ys = [r[field] for n, r in points if r.get(field) is not None]
            ax.plot(xs, ys, _style(label), label=label)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("N (float64, b of shape (N,))")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        written.append(out / name)

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for (n, file), points in tiles.items():
        ax.plot([t for t, _ in points], [r["tflops"] for _, r in points], "o-", label=f"N = {n:,} ({file})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tile size T_A")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("native kernel, 2 GPUs, grid 2x1, float64")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "tile_size.png")
    plt.close(fig)
    written.append(out / "tile_size.png")
    return written


def tables(series: dict, tiles: dict, records: list[dict]) -> str:
    """The Markdown tables of the performance page."""
    sizes = sorted({n for points in series.values() for n, _ in points})
    lines = ["<!-- generated by docs/plots.py from benchmarks/results/h200x2/*/*.jsonl; do not edit -->", "",
             "**Median time per solve** (float64, b of shape (N,); \u2013: not measured)", "",
             "| library | " + " | ".join(f"{n:,}" for n in sizes) + " |",
             "| --- |" + " --- |" * len(sizes)]
    for label, points in series.items():
        by_n = dict(points)
        lines.append(f"| {label} | " + " | ".join(_ms(by_n[n]["median_s"]) if n in by_n else "\u2013"
                                                  for n in sizes) + " |")
    lines += ["", "**TFLOP/s** (N\u00b3/3 flops per Cholesky factorisation)", "",
              "| library | " + " | ".join(f"{n:,}" for n in sizes) + " |",
              "| --- |" + " --- |" * len(sizes)]
    for label, points in series.items():
        by_n = dict(points)
        lines.append(f"| {label} | " + " | ".join(f"{by_n[n]['tflops']:.1f}" if n in by_n and by_n[n].get("tflops")
                                                  else "\u2013" for n in sizes) + " |")
    lines += ["", "**Tile size** (native kernel, 2 GPUs, grid 2x1)", "",
              "| N | T_A | time | TFLOP/s | record |", "| --- | --- | --- | --- | --- |"]
    for (n, _), points in tiles.items():
        for tile, r in points:
            lines.append(f"| {n:,} | {tile} | {_ms(r['median_s'])} | {r['tflops']:.1f} | "
                         f"{r['_file']}{', ' + r['run'] if r.get('run') else ''} |")
    # the derivative benchmark's records (bench_autodiff.py): other benchmarks also write "case"
    autodiff = latest(records, lambda r: r.get("case") if Path(r["_file"]).name.startswith("autodiff") else None)
    if autodiff:
        lines += ["", "**Derivatives, factor once, vmap** (jitted, native backend; "
                  "`benchmarks/bench_autodiff.py`)", "",
                  "| case | N | time | ratio to one solve |", "| --- | --- | --- | --- |"]
        for case, title in AUTODIFF_CASES.items():
            if case in autodiff:
                r = autodiff[case]
                ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "1"
                lines.append(f"| {title} | {r['N']:,} | {_ms(r['median_s'])} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "h200x2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "generated")
    parser.add_argument("--no-plots", action="store_true", help="write tables.md only (no matplotlib)")
    args = parser.parse_args(argv)
    records = load(args.results)
    if not records:
        raise SystemExit(f"no benchmark records under {args.results}")
    series, tiles = solve_series(records), tile_series(records)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tables.md").write_text(tables(series, tiles, records))
    written = [args.out / "tables.md"]
    if not args.no_plots:
        written += plot(series, tiles, args.out)
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    main()
