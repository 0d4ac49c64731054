"""How long `harness health` takes on a big export, against `harness kernels` of the same export.

Builds BIG (benchmarks/make_big_export.py: ~1,000,000 kernels, 6M CUDA runtime calls, 1.8M NVTX ranges;
into --workdir, reused when there) or takes --export, then times, each in a fresh child process, alternating
(the order flips every repeat):

    kernels cold   `harness kernels BIG --format csv` with an empty cache (HARNESS_CACHE_DIR): the anchor
    health cold    `harness health BIG --format json` with an empty cache
    health warm    the same with the cache filled by the run before
    baseline warm  with --baseline DIR (another checkout, e.g. `git archive` of the commit before a change,
                   unpacked): its `harness health` on the same warm cache folder, whose output must be
                   byte for byte the same

Wall time, CPU (user + sys) and peak RSS come from os.wait4; the figures are medians. The figure to trust
on a shared machine is the ratio of health's time to kernels' cold time, both run side by side.

    .venv/bin/python benchmarks/health_speed.py [--export BIG.sqlite | --kernels 1000000]
        [--workdir DIR] [--repeat 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_export import make_big_export

REPO = Path(__file__).resolve().parents[1]
RUN = "import sys; from harness.cli import main; sys.argv[0] = 'harness'; sys.exit(main())"


def child(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float, bytes]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS in MB of a child process, and its stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(argv[-4:])} failed:\n{err.read().decode()[-2000:]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", type=Path, help="an export to time (else BIG is built)")
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels of the built export")
    ap.add_argument(
        "--workdir", type=Path, help="build the export here and keep it (else a temporary folder)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="a checkout of the harness whose `health` to time beside")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="health-speed-") as tmp:
        work = args.workdir or Path(tmp)
        export = args.export
        if export is None:
            export = work / f"big-{args.kernels}.sqlite"
            if not export.exists():
                print(make_big_export(export, args.kernels, shape_variants=3).describe(), flush=True)
        export = export.resolve()
        cold, warm = Path(tmp) / "cold", Path(tmp) / "warm"
        steps = ["kernels cold", "health cold", "health warm"] + ["baseline warm"] * bool(args.baseline)
        runs: dict[str, list[tuple[float, float, float]]] = {}
        outputs: dict[str, bytes] = {}
        for r in range(args.repeat):
            for step in steps if r % 2 == 0 else steps[::-1]:
                tree = args.baseline if step.startswith("baseline") else REPO
                command = ["kernels", str(export), "--format", "csv"] if step.startswith("kernels") else [
                    "health", str(export), "--format", "json"
                ]  # fmt: skip
                cache = warm if step.endswith("warm") else cold
                if cache is cold:
                    shutil.rmtree(cold, ignore_errors=True)
                elif not cache.exists():  # filled once, by a command of this checkout
                    child([sys.executable, "-c", RUN, *command], _env(REPO, warm), REPO)
                wall, cpu, peak, out = child([sys.executable, "-c", RUN, *command], _env(tree, cache), tree)
                runs.setdefault(step, []).append((wall, cpu, peak))
                if not step.startswith("kernels"):
                    outputs.setdefault(step, out)
                print(f"  {step}: {wall:.2f} s, {cpu:.2f} s CPU, {peak:,.0f} MB, load "
                      f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        report(runs)
        if args.baseline and outputs["baseline warm"] != outputs["health warm"]:
            print("the baseline's `health --format json` differs from this checkout's")
            return 1
    return 0


def _env(tree: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "HARNESS_CACHE_DIR": str(cache)}


def report(runs: dict[str, list[tuple[float, float, float]]]) -> None:
    anchor = statistics.median(w for w, _, _ in runs["kernels cold"])
    print(f"\n{'':<15}{'wall (s)':>10}{'CPU (s)':>10}{'peak (MB)':>11}{'/ kernels cold':>16}")
    for step, rs in runs.items():
        wall = statistics.median(w for w, _, _ in rs)
        cpu = statistics.median(c for _, c, _ in rs)
        peak = statistics.median(p for _, _, p in rs)
        print(f"{step:<15}{wall:>10.2f}{cpu:>10.2f}{peak:>11,.0f}{wall / anchor:>16.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
