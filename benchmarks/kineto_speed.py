"""How fast the harness reads a Kineto trace, against Holistic Trace Analysis (HTA) loading the same file.

Builds traces of 280 MB and 2 GB of JSON (by default; --mb, or --events for a count of complete events)
from the diff-control fixture (../shared/fixtures/kineto: a real DLRM-like training trace, 6 profiler
steps, 74,937 complete events) by appending copies of its steps, shifted in time, with fresh correlation,
External and flow ids, until the target is reached (written as they are made, into --workdir; nothing is
committed). Then times, each in a fresh child process, alternating (the order flips every repeat) and
repeated (minimum and median reported, with the load average at each run):

    read      open_trace(TRACE, cache=False) and every frame of the trace model: time in the process
              (import excluded), the whole process's wall time (import included: the MB/s figure), CPU
              (user + sys, workers included) and peak RSS
    baseline  the same with the reader of another checkout (--baseline DIR: e.g. `git archive` of the
              commit before a change, unpacked), under the same load: the ratio is the figure to trust
    parse     orjson.loads of the same pieces of traceEvents (decompressed and cut as the reader does):
              a plain parse into dicts, no table (--parse)
    HTA    TraceAnalysis(trace_dir=FOLDER) with ParserBackend.IJSON_BATCH_AND_COMPRESS: time in the
           process (import excluded) and peak RSS
    cold   `harness kernels TRACE --format csv` with an empty cache (whole process; with --commands)
    warm   the same with the cache filled by a previous run (whole process; with --commands)

Peak RSS is what wait4 reports for the child: the largest of the process and the processes it reaped
(the reader's workers, HTA's parser pool).

HTA is not a dependency of the harness. Install its newest release in a virtual environment of its own,
with ijson's C backend (yajl2_c), and name that environment's python:

    python3 -m venv /work/hta-venv && /work/hta-venv/bin/pip install traceinsight==0.6.1 ijson
    .venv/bin/python benchmarks/kineto_speed.py --hta-python /work/hta-venv/bin/python \
        --workdir /work/bench-kineto --repeat 3

orjson is not a dependency of the harness either: `.venv/bin/pip install orjson` for --parse.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO.parent / "shared" / "fixtures" / "kineto" / "diff-control" / "control.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"}
READ = """
import resource, sys, time
try:
    from analysis.trace.frames import FRAMES
    from analysis.trace.opening import open_trace
except ImportError:  # a --baseline checkout from before analysis/ had sub-packages (b959455)
    from analysis.trace import FRAMES, open_trace
t0 = time.perf_counter()
trace = open_trace(sys.argv[1], cache=False)
for frame in FRAMES:
    trace.frame(frame) if frame not in ("threads", "strings") else trace._columns(frame, list(FRAMES[frame]))
import analysis
print(time.perf_counter() - t0, trace.count("kernels"), analysis.__file__.rsplit("/", 2)[0])
"""
PARSE = """
import sys, time, orjson
from pathlib import Path
from isal import igzip_threaded
from analysis.readers.kineto_stream import Text, TraceStream
t0 = time.perf_counter()
n = 0
with igzip_threaded.open(sys.argv[1], "rb", threads=1) as f:
    for piece in TraceStream(Path(sys.argv[1]), f.read):
        if isinstance(piece, Text):
            n += len(orjson.loads(piece.data))
print(time.perf_counter() - t0, n)
"""
HTA = """
import logging, sys, time, warnings
warnings.simplefilter("ignore")
from hta.configs.config import logger
logger.setLevel(logging.ERROR)
from hta.common.trace_parser import set_default_trace_parsing_backend
from hta.configs.parser_config import ParserBackend
from hta.trace_analysis import TraceAnalysis
set_default_trace_parsing_backend(ParserBackend.IJSON_BATCH_AND_COMPRESS)
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
print(time.perf_counter() - t0, sum(len(df) for df in ta.t.traces.values()))
"""


def make_trace(src: Path, dst: Path, target: int, size: int = 0) -> tuple[int, int]:
    """Write to `dst` the trace `src` with copies of its profiler steps appended until it has `target`
    complete events, or `size` bytes of JSON where given: (complete events written, bytes of uncompressed
    JSON). The copies are written as they are made, so building a 3M-event trace holds only the source
    trace in memory."""
    if not src.is_file():
        raise SystemExit(f"{src} not found: the traces are built from the corpus (../shared/fixtures)")
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    steps = sorted(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )
    first, last = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    period = last - first
    corr_step: dict[int, int] = {}
    owned: list[list[dict[str, Any]]] = [[] for _ in steps]  # the events of each step
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in GPU_CATS and first <= e.get("ts", -1) < last:
            step = next(i for i, s in enumerate(steps) if e["ts"] < s["ts"] + s["dur"])
            owned[step].append(e)
            if "correlation" in e.get("args", {}):
                corr_step[e["args"]["correlation"]] = step
    for e in events:
        key = e.get("args", {}).get("correlation") if e.get("ph") == "X" else e.get("id")
        gpu_or_flow = (e.get("ph") == "X" and e.get("cat") in GPU_CATS) or e.get("ph") in ("s", "f")
        if gpu_or_flow and key in corr_step:
            owned[corr_step[key]].append(e)
    ids = [e.get("args", {}).get(k, 0) for e in events for k in ("correlation", "External id")]
    id_span = max(max(ids), max(e.get("id", 0) for e in events if isinstance(e.get("id"), int))) + 1
    count = sum(e.get("ph") == "X" for e in events)
    dst.parent.mkdir(parents=True, exist_ok=True)
    encode = json.JSONEncoder().encode
    with gzip.open(dst, "wt", compresslevel=1) as f:
        written = f.write(encode(doc)[:-1] + (", " if doc else "") + '"traceEvents": [')
        written += f.write(", ".join(map(encode, events)))
        block = 1
        while count < target if not size else written < size:
            for owned_events in owned:
                if (count >= target) if not size else written >= size:
                    break
                out = []
                for e in owned_events:
                    c = dict(e, ts=e["ts"] + block * period)
                    if "args" in c:
                        args = c["args"] = dict(c["args"])
                        for k in ("correlation", "External id"):
                            if isinstance(args.get(k), int) and args[k] > 0:
                                args[k] += block * id_span
                    if isinstance(c.get("id"), int):
                        c["id"] += block * id_span
                    if str(c.get("name", "")).startswith("ProfilerStep#"):
                        c["name"] = f"ProfilerStep#{int(c['name'][13:]) + block * len(steps)}"
                    out.append(encode(c))
                    count += c.get("ph") == "X"
                written += f.write(", " + ", ".join(out))
            block += 1
        written += f.write("]}")
    return count, written


def child(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, int, float, str]:
    """Wall time of a child process, its peak RSS in KB (wait4: itself or any process it reaped), its CPU
    seconds (user + sys, with the processes it reaped), stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:3])} ... failed:\n{err.read().decode()[-2000:]}")
        return wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime, out.read().decode()


def build(work: Path, name: str, events: int, size: int) -> tuple[Path, int, int]:
    """The trace `name` in `work` (built once, then reused): (path, complete events, bytes of JSON)."""
    path = work / name / "trace.json.gz"
    size_file = path.with_suffix(".size")
    if path.exists() and size_file.exists():
        n, json_bytes = (int(x) for x in size_file.read_text().split())
    else:
        n, json_bytes = make_trace(FIXTURE, path, events, size)
        size_file.write_text(f"{n} {json_bytes}")
    print(f"{path}: {n:,} complete events, {json_bytes / 1e6:,.0f} MB of JSON, "
          f"{path.stat().st_size / 1e6:.0f} MB gzipped", flush=True)  # fmt: skip
    return path, n, json_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", default="", help="complete events of each built trace (e.g. 1000000,3000000)")
    ap.add_argument("--mb", default="280,2000", help="MB of JSON of each built trace (with no --events)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-python", help="the python of a virtual environment with traceinsight and ijson")
    ap.add_argument("--baseline", type=Path, help="a checkout of the harness whose reader to time beside")
    ap.add_argument("--parse", action="store_true", help="also time orjson parsing the same pieces")
    ap.add_argument(
        "--workdir", type=Path, help="build the traces here and keep them (else a temporary folder)"
    )
    ap.add_argument("--commands", action="store_true", help="also time `harness kernels`, cold and warm")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="kineto-speed-") as tmp:
        work = args.workdir or Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        traces: dict[str, tuple[Path, int, int]] = {}
        if args.events:
            for n in (int(x) for x in args.events.split(",")):
                traces[f"{n:,} events"] = build(work, f"kineto-{n}", n, 0)
        else:
            for mb in (int(x) for x in args.mb.split(",")):
                traces[f"{mb:,} MB"] = build(work, f"kineto-{mb}mb", 0, mb * 1_000_000)
        steps = ["read"]
        steps += ["baseline"] * bool(args.baseline) + ["parse"] * args.parse + ["HTA"] * bool(args.hta_python)
        runs: dict[tuple[str, str], list[tuple[float, ...]]] = {}
        cache = Path(tmp) / "cache"
        for r in range(args.repeat):
            for name, (path, _, _) in traces.items():
                for what in steps if r % 2 == 0 else steps[::-1]:
                    load = os.getloadavg()[0]
                    if what == "read":
                        wall, rss, cpu, out = child([sys.executable, "-c", READ, str(path)], env)
                    elif what == "baseline":
                        # run there: `python -c` puts the working folder first on the path
                        base_env = {**os.environ, "PYTHONPATH": str(args.baseline)}
                        argv = [sys.executable, "-c", READ, str(path.resolve())]
                        wall, rss, cpu, out = child(argv, base_env, cwd=args.baseline)
                    elif what == "parse":
                        wall, rss, cpu, out = child([sys.executable, "-c", PARSE, str(path)], env)
                    else:
                        wall, rss, cpu, out = child([args.hta_python, "-c", HTA, str(path.parent)], env)
                    inside = float(out.split()[0])
                    runs.setdefault((name, what), []).append((inside, wall, rss, cpu, load))
                    assert what != "baseline" or out.split()[2] == str(args.baseline), out
                    print(f"  {name} {what}: {inside:.2f} s in the process, {wall:.2f} s whole, {cpu:.2f} s "
                          f"CPU, {rss / 1024:,.0f} MB peak, load {load:.1f}", flush=True)  # fmt: skip
                if args.commands:
                    harness = [sys.executable, "-m", "harness", "kernels", str(path), "--format", "csv"]
                    subprocess.run(["rm", "-rf", str(cache)], check=True)
                    for step in ("cold", "warm"):
                        load = os.getloadavg()[0]
                        wall, rss, cpu, _ = child(harness, {**env, "HARNESS_CACHE_DIR": str(cache)})
                        runs.setdefault((name, step), []).append((wall, wall, rss, cpu, load))
                print(f"repeat {r + 1}: {name} done", flush=True)
        report(runs, traces)


def report(
    runs: dict[tuple[str, str], list[tuple[float, ...]]], traces: dict[str, tuple[Path, int, int]]
) -> None:
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(5)) for k, v in runs.items()}
    low = {k: tuple(min(x[i] for x in v) for i in range(5)) for k, v in runs.items()}
    print("\n| trace | step | in process: min / median (runs) | whole: min / median | CPU: min / median "
          "| peak RSS | MB/s (whole, min / median) | load |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for (name, what), v in runs.items():
        size = traces[name][2] / 1e6
        (t, wall, _, cpu, _), m = low[(name, what)], med[(name, what)]
        each = ", ".join(f"{x[0]:.2f}" for x in v)
        loads = f"{min(x[4] for x in v):.1f}–{max(x[4] for x in v):.1f}"
        print(f"| {name} | {what} | {t:.2f} / {m[0]:.2f} s ({each}) | {wall:.2f} / {m[1]:.2f} s | "
              f"{cpu:.2f} / {m[3]:.2f} s | {max(x[2] for x in v) / 1024:,.0f} MB | "
              f"{size / wall:.0f} / {size / m[1]:.0f} | {loads} |")  # fmt: skip
    for name in traces:
        read = runs[(name, "read")]
        for other in ("baseline", "parse", "HTA"):
            if (name, other) not in runs:
                continue
            pairs = list(zip(read, runs[(name, other)], strict=True))  # the same repeat: the same load
            ratio = sorted(a[1] / b[1] for a, b in pairs)
            cpu = sorted(a[3] / b[3] for a, b in pairs)
            print(
                f"{name}: read / {other}, whole process: min {ratio[0]:.2f}, median "
                f"{statistics.median(ratio):.2f}; CPU: min {cpu[0]:.2f}, median {statistics.median(cpu):.2f}"
            )


if __name__ == "__main__":
    main()
