"""How fast the harness reads a Kineto trace, against Holistic Trace Analysis (HTA) loading the same file.

Builds a trace of about 100,000 complete events from the diff-control fixture (../shared/fixtures/kineto:
a real DLRM-like training trace, 6 profiler steps, 74,937 complete events) by appending copies of its
steps, shifted in time, with fresh correlation, External and flow ids, until the target is reached. Then
times, each in a fresh child process, alternating and repeated (the median is reported):

    read   open_trace(TRACE, cache=False) and every frame of the trace model   (import time excluded)
    HTA    TraceAnalysis(trace_dir=FOLDER): HTA's parse and load of the same file (import time excluded)
    cold   `harness kernels TRACE --format csv` with an empty cache             (whole process)
    warm   the same with the cache filled by a previous run                     (whole process)

HTA is not a dependency of the harness. Install it for this benchmark only, into the venv or beside it:

    .venv/bin/python -m pip install holistictraceanalysis==0.5.0
    # or, without its jupyterlab dependencies:
    .venv/bin/python -m pip install --no-deps --target /tmp/hta holistictraceanalysis==0.5.0 \\
        psutil pydot pyparsing pyyaml networkx
    .venv/bin/python benchmarks/kineto_speed.py --hta-path /tmp/hta [--events 100000] [--repeat 3]
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
import sys, time
from analysis.trace import FRAMES, open_trace
t0 = time.perf_counter()
trace = open_trace(sys.argv[1], cache=False)
for frame in FRAMES:
    trace.frame(frame) if frame not in ("threads", "strings") else trace._columns(frame, list(FRAMES[frame]))
print(time.perf_counter() - t0, trace.count("kernels"))
"""
HTA = """
import logging, sys, time, warnings
warnings.simplefilter("ignore")
from hta.configs.config import logger
logger.setLevel(logging.ERROR)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
print(time.perf_counter() - t0, sum(len(df) for df in ta.t.traces.values()))
"""


def make_trace(src: Path, dst: Path, target: int) -> tuple[int, int]:
    """Write to `dst` the trace `src` with copies of its profiler steps appended until it has `target`
    complete events: (complete events written, bytes of uncompressed JSON). The copies are written as they
    are made, so building a 3M-event trace holds only the source trace in memory."""
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
        while count < target:
            for owned_events in owned:
                if count >= target:
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


def child(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall time of a child process and its stdout."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed:\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000, help="complete events in the built trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-path", help="a folder holding the hta package (pip install --target)")
    ap.add_argument("--keep", type=Path, help="write the built trace here and keep it")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="kineto-speed-") as tmp:
        folder = (args.keep or Path(tmp)) / "trace"
        path = folder / "big.json.gz"
        n, size = make_trace(FIXTURE, path, args.events)  # noqa: RUF059 (used below)
        print(f"built {path}: {n:,} complete events, {path.stat().st_size / 1e6:.1f} MB gzipped", flush=True)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        hta_env = dict(env)
        if args.hta_path:
            hta_env["PYTHONPATH"] = os.pathsep.join([args.hta_path, str(REPO)])
        cache = Path(tmp) / "cache"
        harness = [sys.executable, "-m", "harness", "kernels", str(path), "--format", "csv"]
        runs: dict[str, list[float]] = {"read": [], "HTA": [], "cold": [], "warm": []}
        rows = 0
        for _ in range(args.repeat):
            _, out = child([sys.executable, "-c", READ, str(path)], env)
            runs["read"].append(float(out.split()[0]))
            _, out = child([sys.executable, "-c", HTA, str(folder)], hta_env)
            runs["HTA"].append(float(out.split()[0]))
            rows = int(out.split()[1])
            subprocess.run(["rm", "-rf", str(cache)], check=True)
            runs["cold"].append(child(harness, {**env, "HARNESS_CACHE_DIR": str(cache)})[0])
            runs["warm"].append(child(harness, {**env, "HARNESS_CACHE_DIR": str(cache)})[0])
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"HTA's frame: {rows:,} rows")
        print("| step | median (s) | runs (s) |\n|---|---|---|")
        for k, v in runs.items():
            print(f"| {k} | {med[k]:.2f} | {', '.join(f'{x:.2f}' for x in v)} |")
        print(f"read / HTA load: {med['read'] / med['HTA']:.2f} (≤ 1 is the target)")


if __name__ == "__main__":
    main()
