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
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_export import FIXTURE, make_big_export

if TYPE_CHECKING:
    import pandas as pd

REPO = Path(__file__).resolve().parents[1]
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


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    peak_mb: float


@dataclass
class Cmd:
    """One command line of a group, and how its cache folder is set up for each run."""

    key: str
    argv: list[str]
    # "cold": a fresh empty folder per run; "warm": the group's warm folder of `warm`; "new": a warm folder
    # of its own, filled by `fill`, its kept tables (result.*) removed before each run (a table not asked
    # for before, on an export in the cache); "none": empty, must stay so
    cache: str | None = None
    warm: str = ""  # which export's warm folder
    fill: list[str] | None = None  # "new": the command that fills its folder
    runs: list[Run] = field(default_factory=list)
    stdout: str = ""

    @property
    def wall(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu_s for r in self.runs)

    @property
    def peak(self) -> float:
        return max(r.peak_mb for r in self.runs)


# The commands run as children of a small helper process, not of this script: a child's ru_maxrss
# starts at the size of the process it was forked from (fork and posix_spawn alike), and this script holds
# pandas (make_big_export reads the reader's table names): ~120 MB, more than a warm command served from
# the cache takes (~25 MB).
SPAWNER = """
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    with open(job["out"], "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(
            job["argv"], stdout=out, stderr=subprocess.PIPE, env=job["env"], cwd=job["cwd"]
        )
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    done = {"code": os.waitstatus_to_exitcode(status), "wall": wall, "err": err.decode(errors="replace"),
            "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}
    print(json.dumps(done), flush=True)
"""


class Spawner:
    """The helper that runs each command and reports its wall time, CPU time and peak RSS."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, argv: list[str], env: dict[str, str], out: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": str(REPO), "out": out}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


class Bench:
    def __init__(self, workdir: Path, nsys: Path) -> None:
        self.workdir = workdir
        self.nsys = nsys
        self.spawner = Spawner()
        self.full = True  # False: nvtx-gpu and summary without --no-cache runs and without nvtxkernsum
        self.nsys_new: Path | None = None  # a newer nsys, whose cuda_gpu_kern_sum is timed too
        self.cmds: dict[str, Cmd] = {}
        self.checks: list[tuple[str, str, str]] = []  # (what, result, detail)
        self.pending: list[Callable[[], None]] = []  # output checks, run after every timed run
        self._fresh = 0

    # --- running -----------------------------------------------------------------------------------

    def env(self, cache_dir: Path) -> dict[str, str]:
        # this checkout first; what PYTHONPATH had after it (e.g. a folder with other versions of packages)
        rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != REPO]
        path = os.pathsep.join([str(REPO), *rest])
        env = {**os.environ, "PYTHONPATH": path, "HARNESS_CACHE_DIR": str(cache_dir)}
        # Compiled modules, as an installed harness has them (pandas' and sqlalchemy's are in site-packages):
        # with PYTHONDONTWRITEBYTECODE every run would compile harness/ and analysis/ again (~0.03 s). Kept
        # in the work folder, not beside the sources.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(self.workdir / "pycache")
        return env

    def run_once(self, argv: list[str], cache_dir: Path) -> tuple[Run, str]:
        with tempfile.NamedTemporaryFile() as out:
            done = self.spawner.run(argv, self.env(cache_dir), out.name)
            text = Path(out.name).read_text()
        if done["code"] != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done['code']}): {done['err'][-2000:]}")
        return Run(done["wall"], done["cpu"], done["maxrss_kb"] / 1024), text

    def fresh_dir(self) -> Path:
        self._fresh += 1
        folder = self.workdir / f"cache-fresh-{os.getpid()}-{self._fresh}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def warm_dir(self, group: str, cmd: Cmd) -> Path:
        return self.workdir / f"cache-warm-{group}-{cmd.warm}{'-new' if cmd.cache == 'new' else ''}"

    def run_cmd(self, cmd: Cmd, group: str) -> None:
        folder = self.warm_dir(group, cmd) if cmd.cache in ("warm", "new") else self.fresh_dir()
        if cmd.cache == "new":
            for kept in folder.glob("*/result.*"):
                kept.unlink()
        run, text = self.run_once(cmd.argv, folder)
        cmd.runs.append(run)
        cmd.stdout = text
        if cmd.cache in ("warm", "new"):
            return
        entries = [p for p in folder.iterdir() if p.is_dir()]
        if cmd.cache == "cold" and not entries:
            self.check(f"{cmd.key} fills the cache", False, f"{folder} is empty after the run")
        if cmd.cache == "none" and entries:
            self.check(f"{cmd.key} writes no cache", False, f"{folder} holds {entries}")
        shutil.rmtree(folder, ignore_errors=True)

    def group(self, name: str, cmds: list[Cmd], repeat: int, exports: list[Path]) -> None:
        """Fill the warm caches with one untimed run of each warm command (and each "new" command's
        `fill`), then run the commands in turn."""
        folders = {self.warm_dir(name, c) for c in cmds if c.cache in ("warm", "new")}
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        for export in exports:  # the exports in the page cache, for everyone alike
            with export.open("rb") as f:
                while f.read(1 << 24):
                    pass
        warmed = {}
        for cmd in cmds:
            if cmd.cache == "warm":
                self.run_once(cmd.argv, self.warm_dir(name, cmd))
                warmed[cmd.warm] = self.warm_dir(name, cmd)
        for cmd in cmds:
            if cmd.cache == "new" and cmd.warm in warmed:  # the columns the warm command's cold run read
                shutil.copytree(warmed[cmd.warm], self.warm_dir(name, cmd), dirs_exist_ok=True)
            elif cmd.cache == "new" and cmd.fill is not None:
                self.run_once(cmd.fill, self.warm_dir(name, cmd))
        print(f"[{name}] {len(cmds)} commands x {repeat}, load {_load()}", flush=True)
        for i in range(repeat):
            for cmd in cmds:
                self.run_cmd(cmd, name)
                r = cmd.runs[-1]
                print(f"  {i + 1}/{repeat} {cmd.key:32} {r.wall_s:7.2f} s  cpu {r.cpu_s:6.2f} s  "
                      f"{r.peak_mb:5.0f} MB", flush=True)  # fmt: skip
        self.cmds.update({c.key: c for c in cmds})
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

    # --- checking ----------------------------------------------------------------------------------

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        self.checks.append((what, "yes" if ok else "NO", detail))
        if not ok:
            print(f"  CHECK FAILED: {what}: {detail}", flush=True)

    def same_outputs(self, keys: list[str]) -> None:
        first = self.cmds[keys[0]].stdout
        differ = [k for k in keys[1:] if self.cmds[k].stdout != first]
        self.check(f"{', '.join(keys)}: same output", not differ, f"differ: {differ}" if differ else "")

    def later(self, job: Callable[[], None]) -> None:
        """A check that needs pandas: run after the timed runs, so this process stays small while it
        forks them (a child's ru_maxrss starts at its parent's resident size)."""
        self.pending.append(job)

    def equal_csv(self, what: str, ours: str, theirs: str, key: list[str]) -> None:
        a, b = csv_table(ours), csv_table(theirs)
        if a is None or b is None:
            self.check(what, False, "no table in " + ("the harness's" if a is None else "nsys's") + " output")
        else:
            self.equal_tables(what, a, b, key)

    def equal_tables(self, what: str, ours: pd.DataFrame, theirs: pd.DataFrame, key: list[str]) -> None:
        import pandas as pd

        try:
            pd.testing.assert_frame_equal(ours, theirs, check_dtype=False)
        except AssertionError as e:
            self.check(what, False, first_line(str(e)) + "\n" + row_diff(ours, theirs, key))
        else:
            self.check(what, True, f"{len(ours)} rows")

    def warm_imports(self, key: str, export: Path, argv: list[str]) -> None:
        """Run a warm command once under -X importtime: no SQLAlchemy, and which big modules it loads."""
        warm_dir = self.workdir / "cache-importtime"
        shutil.rmtree(warm_dir, ignore_errors=True)
        warm_dir.mkdir(parents=True)
        self.run_once(argv, warm_dir)
        env = self.env(warm_dir)
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", *argv[1:]], env=env, cwd=REPO, capture_output=True, text=True
        )
        shutil.rmtree(warm_dir, ignore_errors=True)
        loaded = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
        heavy = sorted(loaded & {"sqlalchemy", "pyarrow", "typer", "pydantic", "rich", "plotly", "torch"})
        self.check(f"{key} imports no SQLAlchemy", "sqlalchemy" not in loaded, f"loads {', '.join(heavy)}")


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), text)


def row_diff(ours: pd.DataFrame, theirs: pd.DataFrame, key: list[str], limit: int = 20) -> str:
    """The rows that differ between two tables, matched on `key` columns."""
    if list(ours.columns) != list(theirs.columns):
        return f"columns: harness {list(ours.columns)} vs nsys {list(theirs.columns)}"
    both = ours.merge(theirs, on=key, how="outer", suffixes=(" [harness]", " [nsys]"), indicator=True)
    lines = []
    for _, row in both.iterrows():
        if row["_merge"] != "both":
            lines.append(f"    only in {'harness' if row['_merge'] == 'left_only' else 'nsys'}: "
                         f"{[row[k] for k in key]}")  # fmt: skip
            continue
        cells = [
            f"{c}: {row[f'{c} [harness]']} vs {row[f'{c} [nsys]']}"
            for c in ours.columns
            if c not in key and str(row[f"{c} [harness]"]) != str(row[f"{c} [nsys]"])
        ]
        if cells:
            lines.append(f"    {[str(row[k])[:60] for k in key]}: " + "; ".join(cells))
    more = f"\n    ... {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more if lines else "    (same rows; order differs)"


def csv_table(text: str) -> pd.DataFrame | None:
    """The CSV in a command's stdout (nsys prints `Processing [...]` first); None when nsys SKIPPED."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("Processing [")]
    if not lines or lines[0].startswith("SKIPPED"):
        return None
    import pandas as pd

    return pd.read_csv(io.StringIO("\n".join(lines)))


def csv_sections(text: str) -> dict[str, pd.DataFrame]:
    """`harness summary --format csv`: `# title` lines, each followed by one CSV table."""
    out: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        if line.startswith("# "):
            title = line[2:]
            out[title] = []
        elif title is not None and line.strip():
            out[title].append(line)
    import pandas as pd

    # "# skipped TITLE: why" lines are sections without rows
    return {t: pd.read_csv(io.StringIO("\n".join(rows))) for t, rows in out.items() if rows}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


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
    print(f"load average at start: {_load()} ({os.cpu_count()} CPUs)", flush=True)
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
    print(f"\nload average at end: {_load()}; took {time.time() - started:.0f} s\n")
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
                    "load_end": _load(),
                    "nsys_reports_with_data": with_data,
                },
                indent=1,
            )
        )
    passed = all(t.ok is not False for t in verdict) and all(ok == "yes" for _, ok, _ in bench.checks)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
