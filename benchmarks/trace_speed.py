"""The trace model and its Parquet cache against `nsys stats`, on a small and a big export, in one run.

Builds two exports from a real PyTorch export (benchmarks/make_big_export.py; default source
shared/fixtures/nsys/ext/dlprof_norelu: 46 kernels in 33 launch shapes, 279 CUDA runtime calls, 82 NVTX
ranges, memcpy and memset), with 3 shape variants (99 launch shapes):

- SMALL, ~26,000 kernels: `harness kernels SMALL --format csv` cold (a fresh, empty HARNESS_CACHE_DIR:
  reads the export and fills the cache), warm (the cache filled by one earlier run) and with --no-cache,
  against the import floor `python -c "import pandas, sqlalchemy"`;
- BIG, ~1,000,000 kernels: `harness kernels`, `harness nvtx-gpu --mode thread --kernels --raw-names` and
  `harness summary --raw-names` (NVTX names as recorded, as nsys prints them), each cold, --no-cache and
  warm, against the `nsys stats` reports they mirror; and each once more on a warm cache without its table
  kept ("new table": `kernels --by name`, and nvtx-gpu and summary with PyTorch's names grouped, on a
  cache the measured command filled: the columns are there, the table is computed);
- with `--sizes 1,2,4`: the same (cold, warm, new table; of nsys, gpukernsum alone) on exports of 2 and
  4 times BIG's kernels, in the same alternating runs: times against size, peak memory against BIG's.

Every command is a child process of a small helper of this script (its wall time, its CPU time and its
peak RSS come from os.wait4; the helper holds ~10 MB, where this script holds pandas). The commands of a
group run alternating (A B C A B C ...) `--repeat` times (nvtx-gpu and summary: `--repeat-heavy`); the
figures are medians. Outputs are checked against nsys stats's, table by table (a difference is printed
row by row, and does not stop the run). The last table has every ratio the issues set a target for, with
PASS/FAIL.

    .venv/bin/python benchmarks/trace_speed.py [--repeat 3] [--repeat-small 7] [--workdir DIR]
        [--sizes 1,2,4] [--repeat-heavy 1] [--only small,kernels,nvtx-gpu,summary] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_export import FIXTURE, make_big_export
from trace_bench import REPO, Bench, Cmd, csv_sections, csv_table, load

NSYS = REPO / ".tools" / "nsys" / "usr" / "lib" / "nsight-systems" / "bin" / "nsys"
RSS_LIMIT_MB = 400
GROUPS = ("small", "kernels", "nvtx-gpu", "summary")
# the nsys stats reports `harness summary` mirrors, and the title of its table for each
SUMMARY_REPORTS = {
    "gpukernsum": "CUDA kernels (gpukernsum)",
    "nvtxsum": "NVTX ranges (nvtxsum)",
    "nvtxkernsum": None,  # summary's table is GPU time per range; `nvtx-gpu --kernels` is checked instead
    "cudaapisum": "CUDA API (cudaapisum)",
    "gpumemtimesum": "GPU memory time (gpumemtimesum)",
    "gpumemsizesum": "GPU memory size (gpumemsizesum)",
    "kernexecsum": "Launch latency (kernexecsum)",
    "osrtsum": "OS runtime (osrtsum)",
}


# --- the groups ------------------------------------------------------------------------------------


def harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def modes(
    key: str, argv: list[str], size: str = "", new: list[str] | None = None, no_cache: bool = True
) -> list[Cmd]:
    """cold, --no-cache (at the first size only) and warm runs of `argv` on the export of `size` ("": the
    1M-kernel BIG); with `new`, also that command line on a cache holding the columns but not its table."""
    at = f" @{size}" if size else ""
    out = [Cmd(f"{key} cold{at}", argv, "cold")]
    if not size and no_cache:
        out.append(Cmd(f"{key} --no-cache", [*argv, "--no-cache"], "none"))
    out.append(Cmd(f"{key} warm{at}", argv, "warm", warm=size or "1M"))
    if new is not None:
        out.append(Cmd(f"{key} new table{at}", new, "new", warm=size or "1M", fill=argv))
    return out


def small_group(bench: Bench, small: Path, repeat: int) -> None:
    floor = Cmd("import floor", [sys.executable, "-c", "import pandas, sqlalchemy"])
    kern = modes("small kernels", harness("kernels", str(small), "--format", "csv"))
    bench.group("small", [floor, *kern], repeat, [small])
    bench.same_outputs([c.key for c in kern])
    bench.warm_imports("small kernels warm", small, kern[2].argv)


def kernels_group(bench: Bench, bigs: dict[str, Path], repeat: int) -> None:
    """gpukernsum, and kernels cold, warm and a new table (`--by name`), at every size, alternating."""
    cmds: list[Cmd] = []
    checks = []
    for size, big in bigs.items():
        at = f" @{size}" if size else ""
        nsys = Cmd(
            f"nsys gpukernsum{at}", [str(bench.nsys), "stats", "-r", "gpukernsum", "-f", "csv", str(big)]
        )
        argv = harness("kernels", str(big), "--format", "csv")
        kern = modes("kernels", argv, size, new=[*argv, "--by", "name"])
        cmds += [nsys, *kern]
        checks.append((nsys, kern))
        if bench.nsys_new is not None and not size:
            # nsys 2023.4's report of the same name groups by name alone: `kernels --by name` is its table
            newer = Cmd(
                "nsys 2023.4 cuda_gpu_kern_sum",
                [str(bench.nsys_new), "stats", "-r", "cuda_gpu_kern_sum", "-f", "csv", str(big)],
            )
            by_name = Cmd("kernels --by name cold", [*argv, "--by", "name"], "cold")
            cmds += [newer, by_name]
            bench.later(
                lambda a=by_name, b=newer: bench.equal_csv(f"{a.key} = {b.key}", a.stdout, b.stdout, ["Name"])
            )
    bench.group("kernels", cmds, repeat, list(bigs.values()))
    key = ["Name", "GridXYZ", "BlockXYZ"]
    for nsys, kern in checks:
        bench.same_outputs([c.key for c in kern if "new table" not in c.key])
        bench.later(
            lambda k=kern, n=nsys: bench.equal_csv(f"{k[0].key} = {n.key}", k[0].stdout, n.stdout, key)
        )


def nvtx_group(bench: Bench, bigs: dict[str, Path], repeat: int) -> None:
    """nvtxkernsum (at 1M only: 77 s there, and it grows faster than the export) and nvtx-gpu cold and
    warm at every size."""
    cmds: list[Cmd] = []
    first: list[Cmd] = []
    sized = []
    nsys = None
    for size, big in bigs.items():
        # names as recorded (what nvtxkernsum prints); the new table groups PyTorch's names by operator
        argv = harness("nvtx-gpu", str(big), "--mode", "thread", "--kernels", "--format", "csv")
        ours = modes("nvtx-gpu", [*argv, "--raw-names"], size, new=argv, no_cache=bench.full)
        if not size and bench.full:
            nsys = Cmd(
                "nsys nvtxkernsum", [str(bench.nsys), "stats", "-r", "nvtxkernsum", "-f", "csv", str(big)]
            )
            cmds.append(nsys)
            first = ours
        cmds += ours
        sized.append(ours)
    bench.group("nvtx-gpu", cmds, repeat, list(bigs.values()))
    for ours in sized:
        bench.same_outputs([c.key for c in ours if "new table" not in c.key])
    if first and nsys is not None:
        key = ["NVTX Range", "Style", "PID", "TID", "Kernel Name"]
        bench.later(
            lambda: bench.equal_csv("nvtx-gpu --kernels = nvtxkernsum", first[0].stdout, nsys.stdout, key)
        )


def summary_group(bench: Bench, bigs: dict[str, Path], repeat: int, reuse: dict[str, Cmd]) -> list[str]:
    """harness summary cold and warm at every size, and against each report it mirrors at 1M; returns the
    reports that have data."""
    big = bigs[""]
    nsys = {
        r: Cmd(f"nsys {r}", [str(bench.nsys), "stats", "-r", r, "-f", "csv", str(big)])
        for r in SUMMARY_REPORTS
        if f"nsys {r}" not in reuse
    }
    cmds: list[Cmd] = []
    sized = []
    for size, export in bigs.items():
        argv = harness("summary", str(export), "--format", "csv")
        ours = modes("summary", [*argv, "--raw-names"], size, new=argv, no_cache=bench.full)  # as nvtx_group
        cmds += ours
        sized.append(ours)
    first = sized[0]
    bench.group("summary", [*cmds, *nsys.values()], repeat, list(bigs.values()))
    for ours in sized:
        bench.same_outputs([c.key for c in ours if "new table" not in c.key])
    theirs = {r: (reuse.get(f"nsys {r}") or nsys[r]).stdout for r in SUMMARY_REPORTS}
    with_data = [r for r, text in theirs.items() if not skipped(text)]

    def verify() -> None:
        sections = csv_sections(first[0].stdout)
        for report in with_data:
            title = SUMMARY_REPORTS[report]
            if title is None:
                continue
            if title not in sections:
                bench.check(f"summary has {report}", False, f"no table {title!r} in {list(sections)}")
                continue
            table = csv_table(theirs[report])
            assert table is not None
            key = [c for c in ("Name", "Range", "Style", "Operation", "GridXYZ", "BlockXYZ", "PID", "TID",
                               "DevId", "API Name", "Kernel Name") if c in table.columns]  # fmt: skip
            bench.equal_tables(f"summary {report} = nsys {report}", sections[title], table, key)

    bench.later(verify)
    return with_data


def skipped(nsys_stdout: str) -> bool:
    """nsys stats found no data for the report."""
    return any(line.startswith("SKIPPED") for line in nsys_stdout.splitlines())


# --- the verdict -----------------------------------------------------------------------------------


@dataclass
class Target:
    """One figure the issue sets a target for (or, with `ok` None, one shown beside them)."""

    what: str
    value: float  # from wall times: what the target is about
    unit: str
    target: str
    ok: bool | None
    cpu: float | None = None  # the same figure from CPU times (user + system), steadier on a busy machine

    def row(self) -> list[str]:
        def fmt(v: float | None) -> str:
            if v is None:
                return ""
            return f"{v:+.2f} s" if self.unit == "s over" else f"{v:.2f}{self.unit}"

        verdict = "—" if self.ok is None else "PASS" if self.ok else "FAIL"
        return [self.what, fmt(self.value), self.target, verdict, fmt(self.cpu)]


def targets(c: dict[str, Cmd], with_data: list[str] | None, sizes: dict[str, float]) -> list[Target]:
    """The figures with targets; `sizes`: the labels of the bigger exports and their size in units of BIG."""
    out: list[Target] = []

    def have(*keys: str) -> bool:
        return all(k in c for k in keys)

    def add(what: str, value: float, cpu: float, unit: str, target: str, ok: bool | None) -> None:
        out.append(Target(what, value, unit, target, ok, cpu))

    def speedup(what: str, theirs: list[str], ours: str, least: float | None, aim: str = "") -> None:
        wall = sum(c[k].wall for k in theirs) / c[ours].wall
        cpu = sum(c[k].cpu for k in theirs) / c[ours].cpu
        add(
            what,
            wall,
            cpu,
            "x",
            f">= {least}x{aim}" if least else "—",
            None if least is None else wall >= least,
        )

    def ratio(what: str, a: str, b: str, most: float) -> None:
        wall, cpu = c[a].wall / c[b].wall, c[a].cpu / c[b].cpu
        add(what, wall, cpu, "x", f"<= {most}x", wall <= most)

    if have("import floor", "small kernels cold"):
        floor = c["import floor"]
        for mode, limit in (("cold", 0.25), ("warm", 0.05), ("--no-cache", None)):
            cmd = c[f"small kernels {mode}"]
            over, cpu = cmd.wall - floor.wall, cmd.cpu - floor.cpu
            target = f"<= {limit:+.2f} s" if limit is not None else "—"
            add(f"small: kernels {mode} − import floor", over, cpu, "s over", target,
                None if limit is None else over <= limit)  # fmt: skip
        ratio(
            "small: cache building, kernels cold / --no-cache",
            "small kernels cold",
            "small kernels --no-cache",
            1.3,
        )
    if have("nsys gpukernsum", "kernels cold"):
        n = ["nsys gpukernsum"]
        speedup("big: gpukernsum / kernels cold", n, "kernels cold", 1.3)
        speedup("big: gpukernsum / kernels --no-cache", n, "kernels --no-cache", None)
        speedup("big: gpukernsum / kernels warm", n, "kernels warm", 3, " (aim 5x)")
        # issue 24 section 3, as fractions of nsys's time
        ratio("big: kernels warm / gpukernsum", "kernels warm", "nsys gpukernsum", 0.20)
        ratio("big: kernels cold / gpukernsum", "kernels cold", "nsys gpukernsum", 0.33)  # issue 34 section 4
        if have("kernels new table"):
            ratio(
                "big: kernels --by name, new table / gpukernsum", "kernels new table", "nsys gpukernsum", 0.33
            )
    if have("nsys 2023.4 cuda_gpu_kern_sum", "kernels cold", "kernels --by name cold"):
        n23 = "nsys 2023.4 cuda_gpu_kern_sum"
        ratio("big: kernels cold / 2023.4 cuda_gpu_kern_sum", "kernels cold", n23, 0.33)
        ratio("big: kernels --by name cold (its table) / 2023.4 cuda_gpu_kern_sum", "kernels --by name cold",
              n23, 0.33)  # fmt: skip
    if have("nsys nvtxkernsum", "nvtx-gpu cold"):
        n = ["nsys nvtxkernsum"]
        speedup("big: nvtxkernsum / nvtx-gpu --kernels cold", n, "nvtx-gpu cold", 3)
        speedup("big: nvtxkernsum / nvtx-gpu --kernels --no-cache", n, "nvtx-gpu --no-cache", None)
        speedup("big: nvtxkernsum / nvtx-gpu --kernels warm", n, "nvtx-gpu warm", None)
    if with_data and have("summary warm", *(f"nsys {r}" for r in with_data)):
        n = [f"nsys {r}" for r in with_data]
        speedup("big: sum of the nsys reports / summary warm", n, "summary warm", 3)
        speedup("big: sum of the nsys reports / summary cold", n, "summary cold", None)
    for key in ("kernels", "nvtx-gpu", "summary"):
        if have(f"{key} cold", f"{key} --no-cache"):
            ratio(f"big: cache building, {key} cold / --no-cache", f"{key} cold", f"{key} --no-cache", 1.3)
    # Issue 10 set 400 MB for kernels and nvtx-gpu on 1M kernels; issue 24 section 2 sets it for summary too,
    # cold and warm, and at 2M and 4M kernels no more than 1.25x the command's own 1M figure, and times
    # linear in size (4M <= 4.4x 1M: 1.1x linear).
    for key in ("kernels", "nvtx-gpu", "summary"):
        for mode in ("cold", "--no-cache", "warm", "new table"):
            if have(f"{key} {mode}"):
                peak = c[f"{key} {mode}"].peak
                add(f"big: peak RSS, {key} {mode}", peak, None, " MB", f"<= {RSS_LIMIT_MB} MB",
                    peak <= RSS_LIMIT_MB)  # fmt: skip
    for size, times in sizes.items():
        for key in ("kernels", "nvtx-gpu", "summary"):
            for mode in ("cold", "warm", "new table"):
                base, big = f"{key} {mode}", f"{key} {mode} @{size}"
                if not have(base, big):
                    continue
                ratio(f"{size}: time, {key} {mode} / 1M", big, base, round(1.1 * times, 2))
                grown = c[big].peak / c[base].peak
                add(f"{size}: peak RSS, {key} {mode} / 1M ({c[big].peak:.0f} MB)", grown, None, "x",
                    "<= 1.25x", grown <= 1.25)  # fmt: skip
    return out


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command on the big export")
    parser.add_argument("--repeat-small", type=int, default=7, help="runs of each command on the small one")
    parser.add_argument("--small-kernels", type=int, default=26_000)
    parser.add_argument("--kernels", type=int, default=1_000_000, help="kernels of BIG")
    parser.add_argument(
        "--sizes",
        default="1",
        help="sizes of the big exports, in BIGs (1,2,4: also 2M and 4M kernels); 1 must be among them",
    )
    parser.add_argument("--repeat-heavy", type=int, help="runs of nvtx-gpu and summary (default --repeat)")
    parser.add_argument(
        "--light",
        action="store_true",
        help="nvtx-gpu and summary without their --no-cache runs and without nvtxkernsum (77 s at 1M)",
    )
    parser.add_argument("--shape-variants", type=int, default=3)
    parser.add_argument("--source", type=Path, default=FIXTURE)
    parser.add_argument("--nsys", type=Path, default=Path(os.environ.get("HARNESS_NSYS", NSYS)))
    parser.add_argument(
        "--nsys-new", type=Path, help="a newer nsys (2023.4): its cuda_gpu_kern_sum joins the kernels group"
    )
    parser.add_argument("--workdir", type=Path, help="keep the exports here, reuse them (default: temp dir)")
    parser.add_argument("--only", default=",".join(GROUPS), help="groups to run, comma separated")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args(argv)
    args.sizes = sorted({int(k) for k in args.sizes.split(",") if k.strip()})
    if 1 not in args.sizes:
        parser.error("--sizes must hold 1 (BIG): the other sizes are compared with it")
    groups = {g.strip() for g in args.only.split(",") if g.strip()}
    if unknown := groups - set(GROUPS):
        parser.error(f"unknown groups: {', '.join(sorted(unknown))}")
    if not args.nsys.is_file():
        raise SystemExit(f"nsys not found at {args.nsys}: `make setup` installs it, or set HARNESS_NSYS")
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="trace-speed-")
        args.workdir = Path(tmp.name)
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, groups)
    finally:
        if tmp is not None:
            tmp.cleanup()


def export(workdir: Path, name: str, kernels: int, args: argparse.Namespace) -> Path:
    """The export `name` in `workdir`: reused when built before with the same settings."""
    path = workdir / f"{name}.sqlite"
    stamp = path.with_suffix(".json")
    settings = {"kernels": kernels, "source": str(args.source), "shape_variants": args.shape_variants}
    if path.is_file() and stamp.is_file() and json.loads(stamp.read_text()).get("settings") == settings:
        print(f"{name}: {json.loads(stamp.read_text())['described']} (reused)", flush=True)
        return path
    built = make_big_export(path, kernels, args.source, args.shape_variants)
    stamp.write_text(json.dumps({"settings": settings, "described": built.describe()}))
    print(f"{name}: {built.describe()}", flush=True)
    return path


def run(args: argparse.Namespace, groups: set[str]) -> int:
    started = time.time()
    print(f"load average at start: {load()} ({os.cpu_count()} CPUs)", flush=True)
    bench = Bench(args.workdir, args.nsys)
    bench.nsys_new = args.nsys_new
    bench.full = not args.light
    with_data = None
    if "small" in groups:
        small_group(bench, export(args.workdir, "small", args.small_kernels, args), args.repeat_small)
    if groups & {"kernels", "nvtx-gpu", "summary"}:
        bigs = {
            "" if k == 1 else f"{k}M": export(
                args.workdir, "big" if k == 1 else f"big-{k * args.kernels}", k * args.kernels, args
            )
            for k in args.sizes
        }
        heavy = args.repeat_heavy or args.repeat
        if "kernels" in groups:
            kernels_group(bench, bigs, args.repeat)
        if "nvtx-gpu" in groups:
            nvtx_group(bench, bigs, heavy)
        if "summary" in groups:
            with_data = summary_group(bench, bigs, heavy, bench.cmds)
    print(f"\nload average at end: {load()}; took {time.time() - started:.0f} s\n")
    for job in bench.pending:
        job()
    rows = [
        [
            k,
            f"{c.wall:.2f} s",
            f"{min(r.wall_s for r in c.runs):.2f}-{max(r.wall_s for r in c.runs):.2f} s",
            f"{c.cpu:.2f} s",
            f"{c.peak:.0f} MB",
            str(len(c.runs)),
        ]
        for k, c in bench.cmds.items()
    ]
    print(text_table(["command", "wall median", "wall min-max", "CPU median", "peak RSS", "runs"], rows))
    print()
    verdict = targets(bench.cmds, with_data, {f"{k}M": k for k in args.sizes if k != 1})
    header = ["figure", "measured (wall)", "target", "", "same from CPU time"]
    print(text_table(header, [t.row() for t in verdict]))
    if with_data:
        print(f"(the nsys reports with data: {', '.join(with_data)})")
    print()
    for what, ok, detail in bench.checks:
        print(f"check: {what}: {ok}" + (f" ({detail})" if detail else ""))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "commands": {
                        k: {"argv": c.argv, "runs": [asdict(r) for r in c.runs]}
                        for k, c in bench.cmds.items()
                    },
                    "targets": [asdict(t) for t in verdict],
                    "checks": bench.checks,
                    "load_end": load(),
                    "nsys_reports_with_data": with_data,
                },
                indent=1,
            )
        )
    passed = all(t.ok is not False for t in verdict) and all(ok == "yes" for _, ok, _ in bench.checks)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
