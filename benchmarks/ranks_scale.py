"""A thousand ranks: `harness ranks DIR` and an analysis command over folders of 256 and 1,024 exports, on
the local worker processes (the default) and on a local Dask cluster of 2 workers, cold (an empty cache).

Builds one export of ~6,000 kernels (benchmarks/make_big_export.py --kernels 6000 --shape-variants 3 from
the dlprof fixture: 36,549 runtime calls, 10,742 NVTX ranges, 5 MB) and copies it to ranks-N/run.rankR.sqlite
(reused while the copies are there). For each repeat, each command and each way of running it, the counts
alternate (256 then 1,024, the other order in the next repeat), so that the ratio 1,024 / 256 compares
runs minutes apart. Each run gets a fresh cache folder; a Dask run a fresh cluster (`dask scheduler`, `dask
worker --nworkers 2 --nthreads 1`, started with that cache folder), so every process starts empty.

Memory per process: every process of a run (the command, its local workers; the Dask scheduler, nannies
and workers) is sampled with psutil every 50 ms, and the command's own peak is also read from wait4. CPU
time is the command's and its children's (wait4), plus the Dask processes' (psutil, before and after).

Outputs: for each count, the command's CSV on the local workers, on Dask and in one process (`--jobs 1`,
the sequential run, with --check-sequential) must be the same bytes: the combined tables and, for
`ranks`, the straggler table.

    PYTHONPATH=. .venv/bin/python benchmarks/ranks_scale.py --workdir /work/bench-data/scale34 \\
        [--counts 256,1024] [--commands ranks,kernels] [--modes local,dask] [--repeat 2] [--check-sequential]
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_export import make_big_export, rank_copy

REPO = Path(__file__).resolve().parents[1]
RSS_LIMIT_MB = 500
TIME_RATIO = 4.4  # 1,024 ranks at most this many times 256
COMMANDS = {
    "ranks": ["ranks"],
    "kernels": ["kernels"],
    "summary": ["summary"],
    "nvtx": ["nvtx"],
    "api": ["api"],
}


@dataclass
class Run:
    command: str
    mode: str
    count: int
    wall_s: float
    cpu_s: float
    peak_mb: dict[str, float]  # process kind -> the largest peak RSS among them
    load: str
    out_bytes: int = 0


@dataclass
class Sampler:
    """Peak RSS of the processes under `roots` (pid -> (what the root is, what its descendants are)),
    every 50 ms."""

    roots: dict[int, tuple[str, str]]
    kinds: dict[int, str] = field(default_factory=dict)
    peaks: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        import psutil

        procs = {}
        for pid, kinds in self.roots.items():
            with contextlib.suppress(psutil.Error):
                procs[psutil.Process(pid)] = kinds
        while not self.stop.is_set():
            for root, (own, below) in procs.items():
                try:
                    family = [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
                for p in family:
                    try:
                        rss = p.memory_info().rss / 2**20
                    except psutil.Error:
                        continue
                    self.peaks[p.pid] = max(self.peaks.get(p.pid, 0.0), rss)
                    self.kinds.setdefault(p.pid, own if p.pid == root.pid else below)
            self.stop.wait(0.05)

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, peak in self.peaks.items():
            kind = self.kinds.get(pid, "?")
            out[kind] = max(out.get(kind, 0.0), peak)
        return out


def _cpu_of(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Cluster:
    """A local Dask cluster of 2 single-threaded workers, as processes of their own, with `env`."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        self.file = work / f"scheduler-{os.getpid()}-{time.time_ns()}.json"
        dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
        self.scheduler = subprocess.Popen(
            [*dask, "--port", "0", "--dashboard-address", ":0", "--scheduler-file", str(self.file)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        for _ in range(600):
            if self.file.is_file() and self.file.stat().st_size:
                break
            time.sleep(0.1)
        self.address = json.loads(self.file.read_text())["address"]
        self.workers = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--nworkers", "2",
             "--nthreads", "1", "--memory-limit", "0", "--no-dashboard"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)

    @property
    def pids(self) -> list[int]:
        return [self.scheduler.pid, self.workers.pid]

    def close(self) -> None:
        for proc in (self.workers, self.scheduler):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.file.unlink(missing_ok=True)


def run_once(command: str, mode: str, count: int, folder: Path, work: Path) -> tuple[Run, bytes]:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE_DIR": str(cache),
           "PYTHONPYCACHEPREFIX": str(work / "pycache")}  # fmt: skip
    argv = [sys.executable, "-m", "harness", *COMMANDS[command], str(folder), "--format", "csv"]
    cluster = None
    if mode == "dask":
        cluster = Cluster(env, work)
        argv += ["--dask", cluster.address]
    elif mode == "seq":
        argv += ["--jobs", "1"]
    try:
        dask_cpu = _cpu_of(cluster.pids) if cluster else 0.0
        with tempfile.TemporaryFile() as out:
            start = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=REPO)
            roots = {proc.pid: ("command", "worker")}
            if cluster is not None:
                roots[cluster.scheduler.pid] = ("dask scheduler", "dask scheduler")
                roots[cluster.workers.pid] = ("dask nanny", "dask worker")
            sampler = Sampler(roots)
            thread = threading.Thread(target=sampler.run, daemon=True)
            thread.start()
            assert proc.stderr is not None
            err = proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            sampler.stop.set()
            thread.join()
            cpu = usage.ru_utime + usage.ru_stime + (_cpu_of(cluster.pids) - dask_cpu if cluster else 0.0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"{' '.join(argv)} failed: {err.decode()[-2000:]}")
            out.seek(0)
            text = out.read()
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(cache, ignore_errors=True)
    peaks = sampler.by_kind()
    peaks["command (wait4)"] = usage.ru_maxrss / 1024  # the command and the children it reaped
    return Run(command, mode, count, wall, cpu, peaks, _load(), len(text)), text


def folders(work: Path, counts: list[int]) -> dict[int, Path]:
    base = work / "rank-base.sqlite"
    if not base.is_file():
        built = make_big_export(base, kernels=6000, shape_variants=3)
        print(f"each export: {built.describe()}", flush=True)
    out = {}
    for n in counts:
        folder = work / f"ranks-{n}"
        folder.mkdir(parents=True, exist_ok=True)
        for r in range(n):
            p = folder / f"run.rank{r}.sqlite"
            if not p.is_file() or p.stat().st_size != base.stat().st_size:
                rank_copy(base, p, r)
        out[n] = folder
    return out


def _line(run: Run) -> str:
    peaks = ", ".join(f"{k} {v:.0f}" for k, v in run.peak_mb.items())
    return (
        f"{run.command:8} {run.mode:6} {run.count:5} ranks: {run.wall_s:7.1f} s wall, {run.cpu_s:7.1f} s CPU,"
        " "
        f"peak RSS (MB) {peaks}; load {run.load}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--counts", default="256,1024")
    parser.add_argument("--commands", default="ranks,kernels")
    parser.add_argument("--modes", default="local,dask")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--check-sequential", action="store_true", help="also run each count with --jobs 1")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    counts = sorted(int(c) for c in args.counts.split(","))
    commands = args.commands.split(",")
    modes = args.modes.split(",")
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    where = folders(work, counts)
    print(f"load average at start: {_load()} ({os.cpu_count()} CPUs)", flush=True)
    runs: list[Run] = []
    outputs: dict[tuple[str, int], dict[str, bytes]] = {}
    for i in range(args.repeat):
        for command in commands:
            for mode in modes:
                for count in counts if i % 2 == 0 else reversed(counts):
                    run, text = run_once(command, mode, count, where[count], work)
                    runs.append(run)
                    outputs.setdefault((command, count), {})[mode] = text
                    print(_line(run), flush=True)
    if args.check_sequential:
        for command in commands:
            for count in counts:
                run, text = run_once(command, "seq", count, where[count], work)
                runs.append(run)
                outputs[(command, count)]["seq"] = text
                print(_line(run), flush=True)
    print(f"\nload average at end: {_load()}\n")
    verdicts = []
    lo, hi = counts[0], counts[-1]
    for command in commands:
        for mode in modes:

            def walls(n: int, mode: str = mode, command: str = command) -> list[float]:
                return [r.wall_s for r in runs if (r.command, r.mode, r.count) == (command, mode, n)]

            def cpus(n: int, mode: str = mode, command: str = command) -> list[float]:
                return [r.cpu_s for r in runs if (r.command, r.mode, r.count) == (command, mode, n)]

            if hi != lo:
                ratio = statistics.median(walls(hi)) / statistics.median(walls(lo))
                cpu_ratio = statistics.median(cpus(hi)) / statistics.median(cpus(lo))
                limit = TIME_RATIO * hi / lo / 4
                verdicts.append((f"{command} {mode}: time {hi} / {lo} (wall; CPU {cpu_ratio:.2f})", ratio,
                                 f"<= {limit:.2f}", ratio <= limit))  # fmt: skip
            peak = max(v for r in runs if (r.command, r.mode) == (command, mode) for v in r.peak_mb.values())
            verdicts.append((f"{command} {mode}: peak RSS per process", peak, f"<= {RSS_LIMIT_MB} MB",
                             peak <= RSS_LIMIT_MB))  # fmt: skip
        for count in counts:
            texts = outputs[(command, count)]
            same = len(set(texts.values())) == 1
            verdicts.append((f"{command} {count}: same bytes ({', '.join(texts)})", float(same), "", same))
    for what, value, target, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {what}: {value:.2f} {target}")
    if args.json:
        args.json.write_text(json.dumps({"runs": [asdict(r) for r in runs],
                                         "verdicts": [list(v) for v in verdicts]}, indent=1))  # fmt: skip
    return 0 if all(v[3] for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
