"""How long `harness health` (and `harness advise`) take on a big export, against `harness kernels` of the
same export.

Builds BIG (benchmarks/make_big_export.py: ~1,000,000 kernels, 6M CUDA runtime calls, 1.8M NVTX ranges;
into --workdir, reused when there) or takes --export, then times, each in a fresh child process, alternating
(the order flips every repeat):

    kernels cold          `harness kernels BIG --format csv`, an empty cache (HARNESS_CACHE_DIR): the anchor
    health cold           `harness health BIG --format json` with an empty cache
    health warm           the same with the cache filled by a run of the command before
    baseline health warm  with --baseline DIR (another checkout, e.g. `git worktree add DIR <commit before a
                          change>`): its `harness health` on the same warm cache folder
    baseline health cold  its `harness health` with an empty cache

Every output of a command (this checkout's and the baseline's, warm and cold) must be byte for byte the same.
`--commands health,advise` times `harness advise BIG --format json` the same way (advise cold, advise warm,
baseline advise warm and cold).

BIG's steps: the default source (a DLProf capture) has no `step` ranges, so the checks and rules that work
per step never run on it. `--source ../shared/fixtures/nsys/h100-medium/report.sqlite --within measured`
builds a capture of the harness's own training loop instead (`harness run medium --nsys` on an H100, its 10
measured steps repeated in its `measured` range, each copy with step numbers of its own: 1M kernels come as
370 measured steps with their forward, backward and optimizer ranges; make_big_export.py says how).

Wall time, CPU (user + sys) and peak RSS come from os.wait4; the figures are medians. The figure to trust
on a shared machine is the ratio of a command's time to kernels' cold time, both run side by side.

    .venv/bin/python benchmarks/health_speed.py [--export BIG.sqlite | --kernels 1000000 [--source PATH]
        [--within RANGE]] [--commands health,advise] [--workdir DIR] [--repeat 3] [--baseline DIR]
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
from make_big_export import FIXTURE, make_big_export

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
    ap.add_argument("--baseline", type=Path, help="a checkout of the harness whose commands to time beside")
    ap.add_argument("--source", type=Path, default=FIXTURE, help="the export BIG is built from")
    ap.add_argument(
        "--within", metavar="RANGE", help="build BIG from what lies in this NVTX range (measured)"
    )
    ap.add_argument(
        "--commands", default="health", help="the commands to time, of health and advise (comma-separated)"
    )
    args = ap.parse_args(argv)
    commands = args.commands.split(",")
    if not commands or set(commands) - {"health", "advise"}:
        ap.error("--commands takes health and advise")

    with tempfile.TemporaryDirectory(prefix="health-speed-") as tmp:
        work = args.workdir or Path(tmp)
        export = args.export
        if export is None:
            named = "" if args.source == FIXTURE else f"-{args.source.parent.name}"
            export = work / f"big-{args.kernels}{named}{f'-{args.within}' if args.within else ''}.sqlite"
            if not export.exists():
                built = make_big_export(
                    export, args.kernels, args.source, shape_variants=3, within=args.within
                )
                print(built.describe(), flush=True)
        export = export.resolve()
        cold, warm = Path(tmp) / "cold", Path(tmp) / "warm"
        steps = ["kernels cold"]
        for c in commands:
            steps += [f"{c} cold", f"{c} warm"] + [f"baseline {c} warm", f"baseline {c} cold"] * bool(
                args.baseline
            )
        runs: dict[str, list[tuple[float, float, float]]] = {}
        outputs: dict[str, bytes] = {}
        filled: set[str] = set()
        for r in range(args.repeat):
            for step in steps if r % 2 == 0 else steps[::-1]:
                tree = args.baseline if step.startswith("baseline") else REPO
                name = step.split()[-2]
                command = [name, str(export), "--format", "csv" if name == "kernels" else "json"]
                cache = warm if step.endswith("warm") else cold
                if cache is cold:
                    shutil.rmtree(cold, ignore_errors=True)
                elif name not in filled:  # filled once per command, by this checkout's
                    child([sys.executable, "-c", RUN, *command], _env(REPO, warm), REPO)
                    filled.add(name)
                wall, cpu, peak, out = child([sys.executable, "-c", RUN, *command], _env(tree, cache), tree)
                runs.setdefault(step, []).append((wall, cpu, peak))
                if name != "kernels":
                    outputs.setdefault(step, out)
                print(f"  {step}: {wall:.2f} s, {cpu:.2f} s CPU, {peak:,.0f} MB, load "
                      f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        report(runs)
        for c in commands:
            differ = [s for s in outputs if s.split()[-2] == c and outputs[s] != outputs[f"{c} warm"]]
            if differ:
                print(f"`{c} --format json` differs between {c} warm and {', '.join(differ)}")
                return 1
    return 0


def _env(tree: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "HARNESS_CACHE_DIR": str(cache)}


def report(runs: dict[str, list[tuple[float, float, float]]]) -> None:
    anchor = statistics.median(w for w, _, _ in runs["kernels cold"])
    print(f"\n{'':<22}{'wall (s)':>10}{'CPU (s)':>10}{'peak (MB)':>11}{'/ kernels cold':>16}")
    for step, rs in runs.items():
        wall = statistics.median(w for w, _, _ in rs)
        cpu = statistics.median(c for _, c, _ in rs)
        peak = statistics.median(p for _, _, p in rs)
        print(f"{step:<22}{wall:>10.2f}{cpu:>10.2f}{peak:>11,.0f}{wall / anchor:>16.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
