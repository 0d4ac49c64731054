"""`harness timeline` at scale: peak memory and time of a Chrome trace written from big exports, and the
same bytes as another checkout's on every export of the corpus (and any other given).

For each export given (default: the 1M- and 4M-kernel exports of benchmarks/trace_speed.py in
--workdir), `harness timeline EXPORT -o OUT.json.gz --no-cache` runs as a child process; wall time, CPU
(user + system) and peak RSS come from wait4. With `--baseline DIR` (a checkout of an earlier commit,
e.g. `git archive COMMIT | tar -x -C DIR`), the corpus (../shared/fixtures/nsys/*/report.sqlite,
ext/*/report.sqlite and the Kineto traces) is written by both trees, with --no-cache, a cold cache and a
warm one, and compared byte for byte; `--compare-big` compares the big exports' files as well (minutes).

    PYTHONPATH=. .venv/bin/python benchmarks/timeline_memory.py --workdir /work/bench-data \\
        [--exports big.sqlite,big-4000000.sqlite] [--baseline /tmp/base] [--compare-big] [--json OUT]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "fixtures"
LIMIT_MB = 400


def corpus() -> list[Path]:
    nsys = sorted(SHARED.glob("nsys/*/report.sqlite")) + sorted(SHARED.glob("nsys/ext/*/report.sqlite"))
    kineto = sorted(SHARED.glob("kineto/*/*.json.gz")) + sorted(SHARED.glob("kineto/*/*.raw.gz"))
    return nsys + kineto


def timeline(tree: Path, export: Path, out: Path, cache: Path | None) -> dict[str, float]:
    """One `harness timeline` of `tree`'s code: wall, CPU and peak RSS (MB)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(out.parent / "pycache")}
    argv = [sys.executable, "-m", "harness", "timeline", str(export), "-o", str(out)]
    if cache is None:
        argv.append("--no-cache")
    else:
        env["HARNESS_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} in {tree} failed: {err.decode()[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def same_bytes(base: Path, exports: list[Path], work: Path) -> list[tuple[str, str, bool]]:
    """Each export written by both trees, without a cache, cold and warm: (export, how, same)."""
    out = []
    for export in exports:
        caches = {tree: Path(tempfile.mkdtemp(dir=work)) for tree in ("base", "new")}
        for how in ("no cache", "cold", "warm"):
            files = {}
            for name, tree in (("base", base), ("new", REPO)):
                files[name] = work / f"{name}.json"
                timeline(tree, export, files[name], None if how == "no cache" else caches[name])
            same = filecmp.cmp(files["base"], files["new"], shallow=False)
            out.append((str(export), how, same))
            print(f"{'same' if same else 'DIFF'}  {how:8}  {export}", flush=True)
        for c in caches.values():
            shutil.rmtree(c, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--exports", default="big.sqlite,big-4000000.sqlite")
    parser.add_argument("--baseline", type=Path, help="a checkout to compare the files with")
    parser.add_argument("--compare-big", action="store_true", help="compare the big exports' files too")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    big = [args.workdir / e for e in args.exports.split(",") if e]
    work = Path(tempfile.mkdtemp(prefix="timeline-", dir=args.workdir))
    result: dict[str, object] = {"load_start": os.getloadavg()}
    try:
        if args.baseline is not None:
            result["same"] = same_bytes(args.baseline, corpus() + (big if args.compare_big else []), work)
        runs = {}
        for export in big:
            run = timeline(REPO, export, work / "big.json.gz", None)
            run["load"] = os.getloadavg()[0]
            runs[export.name] = run
            print(f"timeline {export.name} --no-cache: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s CPU, "
                  f"peak {run['peak_mb']:.0f} MB (load {run['load']:.1f})", flush=True)  # fmt: skip
        result["runs"] = runs
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_end"] = os.getloadavg()
    ok = all(r["peak_mb"] <= LIMIT_MB for r in result["runs"].values())  # type: ignore[attr-defined]
    ok &= all(same for _, _, same in result.get("same", []))  # type: ignore[attr-defined]
    print(("PASS" if ok else "FAIL") + f": peak RSS <= {LIMIT_MB} MB and the same bytes")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
