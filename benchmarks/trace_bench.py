"""What benchmarks/trace_speed.py runs its commands with: each command a child of a small helper process
(its wall time, CPU time and peak RSS from os.wait4), in groups that alternate, with its cache folder set up
cold, warm or with a table not kept before; and the checks of their outputs against nsys stats's."""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

REPO = Path(__file__).resolve().parents[1]


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
        print(f"[{name}] {len(cmds)} commands x {repeat}, load {load()}", flush=True)
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


def load() -> str:
    """The machine's load averages (1, 5, 15 min), as the benchmark prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
