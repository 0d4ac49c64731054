"""Many exports, one analysis: one `harness kernels` over 8 exports on 2 local workers against 8 sequential
single-export `harness kernels` commands, cold cache and warm cache, in one run.

Builds one export of ~250,000 kernels from a real PyTorch export (benchmarks/make_big_export.py
--kernels 250000 --shape-variants 3) and copies it to run.rank0..7.sqlite (8 files: 8 cache entries, 8 reads).

- sequential: `harness kernels run.rankR.sqlite --format csv` for R = 0..7, one after the other (8 processes);
- combined: `harness kernels DIR --format csv --jobs 2` (1 process, 2 worker processes).

Cold: a fresh, empty HARNESS_CACHE_DIR (every export is read from SQLite and cached); warm: the cache the cold
run filled. Each repeat runs cold sequential, cold combined, warm sequential, warm combined, alternating which
of the pair goes first; the figures are medians, the ratio is combined / sequential within the same repeat.

Memory: every command is a child of this script. os.wait4 gives each command's peak RSS, and for the combined
command that figure already covers its workers (the kernel folds the peak of reaped children into the
parent's): an upper bound for any one worker. Each worker's own peak is also sampled with psutil
(every 20 ms, the harness process's children) when psutil is installed. Forked workers count the pages
they share with the parent in their RSS, so both figures overstate what a worker adds.

    .venv/bin/python benchmarks/multi_speed.py [--repeat 3] [--kernels 250000] [--exports 8] [--jobs 2]
        [--workdir DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_export import make_big_export, rank_copy

REPO = Path(__file__).resolve().parents[1]
RATIO_TARGET = 0.65
RSS_LIMIT_MB = 400


@dataclass
class Run:
    wall_s: float
    peak_mb: float  # os.wait4: the command and every child it reaped
    worker_peak_mb: float = 0.0  # psutil: the largest worker's sampled RSS (0 when not sampled)


@dataclass
class Series:
    runs: list[Run] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)


def _sample_children(pid: int, peaks: dict[int, float], stop: threading.Event) -> None:
    try:
        import psutil
    except ImportError:
        return
    try:
        parent = psutil.Process(pid)
    except psutil.Error:
        return
    while not stop.is_set():
        try:
            for child in parent.children():
                try:
                    rss = child.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                peaks[child.pid] = max(peaks.get(child.pid, 0.0), rss)
        except psutil.Error:
            return
        stop.wait(0.02)


def run_once(argv: list[str], cache_dir: Path) -> tuple[Run, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE_DIR": str(cache_dir)}
    peaks: dict[int, float] = {}
    stop = threading.Event()
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=REPO)
        sampler = threading.Thread(target=_sample_children, args=(proc.pid, peaks, stop), daemon=True)
        sampler.start()
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return Run(wall, usage.ru_maxrss / 1024, max(peaks.values(), default=0.0)), text


def harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=250_000)
    parser.add_argument("--exports", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="multi-speed-"))
    exports = work / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    built = make_big_export(work / "base.sqlite", kernels=args.kernels, shape_variants=3)
    print(f"each export: {built.describe()}", flush=True)
    paths = []
    for r in range(args.exports):
        paths.append(rank_copy(built.path, exports / f"run.rank{r}.sqlite", r))
    seq_cmds = [harness("kernels", str(p), "--format", "csv") for p in paths]
    many_cmd = harness("kernels", str(exports), "--format", "csv", "--jobs", str(args.jobs))
    series = {k: Series() for k in ("seq-cold", "many-cold", "seq-warm", "many-warm")}
    ratios: dict[str, list[float]] = {"cold": [], "warm": []}
    outputs: dict[str, str] = {}
    for i in range(args.repeat):
        caches = {k: work / f"cache-{k}-{i}" for k in ("seq", "many")}
        for c in caches.values():
            shutil.rmtree(c, ignore_errors=True)
            c.mkdir()
        for temp in ("cold", "warm"):
            order = ("seq", "many") if i % 2 == 0 else ("many", "seq")
            walls = {}
            for kind in order:
                if kind == "seq":
                    runs = [run_once(cmd, caches["seq"]) for cmd in seq_cmds]
                    run = Run(sum(r.wall_s for r, _ in runs), max(r.peak_mb for r, _ in runs))
                    outputs["seq"] = runs[0][1]
                else:
                    run, outputs["many"] = run_once(many_cmd, caches["many"])
                series[f"{kind}-{temp}"].runs.append(run)
                walls[kind] = run.wall_s
            ratios[temp].append(walls["many"] / walls["seq"])
            print(
                f"repeat {i + 1} {temp}: sequential {walls['seq']:.2f} s, combined {walls['many']:.2f} s, "
                f"ratio {walls['many'] / walls['seq']:.3f}",
                flush=True,
            )
    import pandas as pd

    one = pd.read_csv(io.StringIO(outputs["seq"]))
    many = pd.read_csv(io.StringIO(outputs["many"]))
    same = int(many["Instances"].sum()) == args.exports * int(one["Instances"].sum())
    many_runs = series["many-cold"].runs + series["many-warm"].runs
    peak_all = max(r.peak_mb for r in many_runs)
    peak_worker = max(r.worker_peak_mb for r in many_runs)
    result = {
        "exports": args.exports,
        "kernels_each": built.kernels,
        "jobs": args.jobs,
        "cpu_count": os.cpu_count(),
        "sequential_cold_s": series["seq-cold"].wall,
        "combined_cold_s": series["many-cold"].wall,
        "sequential_warm_s": series["seq-warm"].wall,
        "combined_warm_s": series["many-warm"].wall,
        "ratio_cold": statistics.median(ratios["cold"]),
        "ratio_warm": statistics.median(ratios["warm"]),
        "ratios": ratios,
        "combined_peak_rss_mb_with_workers": peak_all,
        "worker_peak_rss_mb_sampled": peak_worker,
        "sequential_peak_rss_mb": max(r.peak_mb for s in ("seq-cold", "seq-warm") for r in series[s].runs),
        "instances_are_8x": same,
        "command": " ".join(["python", "-m", "harness", *many_cmd[3:]]),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "ratios"}, indent=1))
    verdicts = [
        ("cold ratio", result["ratio_cold"] <= RATIO_TARGET, f"{result['ratio_cold']:.3f} <= {RATIO_TARGET}"),
        ("warm ratio", result["ratio_warm"] <= RATIO_TARGET, f"{result['ratio_warm']:.3f} <= {RATIO_TARGET}"),
        ("worker RSS", peak_all < RSS_LIMIT_MB, f"{peak_all:.0f} MB < {RSS_LIMIT_MB} MB (upper bound)"),
        ("combined = 8 x one", same, "Instances"),
    ]
    for what, ok, detail in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {what}: {detail}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(ok for _, ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
