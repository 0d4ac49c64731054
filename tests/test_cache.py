"""The trace model's reads and its Parquet cache: each source table read once, later commands from Parquet
alone, and an entry that is corrupt, stale, concurrent or unwritable never gives a wrong table."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import SHARED_NSYS, need
from export_data import as_printed, oracle
from kineto_data import write_trace

import analysis.readers
import analysis.readers.nsys_open as nsys_open
import analysis.readers.nsys_sql as nsys_sql
from analysis.tables.kernels import kernel_summary
from analysis.tables.nvtx import nvtx_summary
from analysis.tables.summary import summary
from analysis.trace.cache import Cache, parse_size
from analysis.trace.opening import open_trace


def test_summary_reads_each_source_table_once(a100_export: Path) -> None:
    trace = open_trace(a100_export, cache=False)
    report = summary(trace)
    assert len(report.tables) == 7
    assert trace.source_reads == {
        "CUPTI_ACTIVITY_KIND_KERNEL": 1,
        "CUPTI_ACTIVITY_KIND_RUNTIME": 1,
        "CUPTI_ACTIVITY_KIND_MEMCPY": 1,
        "NVTX_EVENTS": 1,
        "StringIds": 1,
    }


def test_second_open_reads_parquet_only(a100_export: Path, a100_expected: Path, cache_dir: Path) -> None:
    with open_trace(a100_export) as cold:
        kernel_summary(cold)
        assert cold.source_reads["CUPTI_ACTIVITY_KIND_KERNEL"] == 1
    files = sorted(p.name for p in next(p for p in cache_dir.iterdir() if p.is_dir()).iterdir())
    assert "kernels.grid.parquet" in files and "meta.json" in files
    assert "kernels.correlation_id.parquet" not in files  # only the columns the table read
    warm = open_trace(a100_export)
    table = kernel_summary(warm)
    assert warm.source_reads == {}
    pd.testing.assert_frame_equal(as_printed(table), oracle(a100_expected, "gpukernsum"))
    assert warm.count("kernels") == 5 and warm.meta["schema"] == "2.9.1"


def test_a_warm_count_reads_no_column(a100_export: Path, cache_dir: Path, monkeypatch) -> None:
    """Health counts every frame's rows: with the frame cached, Trace.count read a whole column of it from
    the cache (and kept it) to take its length. It reads the cached column's footer now: no column is read,
    none is held, and the export is not opened; the counts are the export's own."""
    from export_data import query_rows

    from analysis.trace import cache_entry

    with open_trace(a100_export) as cold:
        cold.frame("kernels", ["start", "end"])
        cold.frame("runtime", ["start", "end"])
    loaded: list[str] = []
    load = cache_entry.Entry.load
    monkeypatch.setattr(
        cache_entry.Entry,
        "load",
        lambda self, frame, columns: loaded.append(frame) or load(self, frame, columns),
    )
    with open_trace(a100_export) as warm:
        counts = warm.count("kernels"), warm.count("runtime")
        assert not warm.holds("kernels", ["start"]) and not warm.holds("runtime", ["start"])
        assert loaded == [] and warm.source_reads == {}
    tables = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")
    assert (
        counts == tuple(query_rows(a100_export, f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables) == (5, 95)
    )


def test_a_warm_nvtx_table_does_not_open_the_export(cpu_export: Path, cache_dir: Path) -> None:
    """Whether some NVTX range never ends (every NVTX table says so) is read from the export once and kept
    with the entry's meta: the warm table opens nothing but the cache."""
    with open_trace(cpu_export) as cold:
        nvtx_summary(cold)
    with open_trace(cpu_export) as kernels_first:  # a command that reads none of those facts
        kernels_first.frame("nvtx", ["start"])
    warm = open_trace(cpu_export)
    table = nvtx_summary(warm)
    assert warm._reader is None and len(table) == 4  # step, forward, backward, optimizer
    assert warm.capture_facts()["nvtx_ranges"] == 32 and warm._reader is None


def _kernels_twice(report: Path, module: str, cache: Path) -> list[subprocess.CompletedProcess[str]]:
    """`harness kernels REPORT --format csv` run twice in fresh processes sharing the cache folder `cache`
    (cold, then warm), each output ending with a line saying whether `module` was imported: the module's
    name in capitals, or NO- before it."""
    code = (
        "import sys\nfrom harness.cli import app\n"
        "try:\n    app(['kernels', sys.argv[1], '--format', 'csv'])\nexcept SystemExit:\n    pass\n"
        f"print(('' if {module!r} in sys.modules else 'NO-') + {module.upper()!r})"
    )
    env = {**os.environ, "HARNESS_CACHE_DIR": str(cache)}
    return [
        subprocess.run([sys.executable, "-c", code, str(report)], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]


def test_warm_command_needs_no_sqlalchemy(a100_export: Path, tmp_path: Path) -> None:
    runs = _kernels_twice(a100_export, "sqlalchemy", tmp_path / "c")
    assert [r.stdout.strip().splitlines()[-1] for r in runs] == ["SQLALCHEMY", "NO-SQLALCHEMY"]
    assert runs[0].stdout.splitlines()[:2] == runs[1].stdout.splitlines()[:2]
    assert "88573480" in runs[1].stdout


def test_warm_command_on_a_kineto_trace_needs_no_pandas(tmp_path: Path) -> None:
    """The Kineto reader imports pandas (its frames are built with it); a warm command is served from the
    cache, so it imports neither (0.5-0.8 s of a warm `kernels` of a 280 MB trace was that import)."""
    args = {"stream": 7, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 4 + i % 3,
         "args": {**args, "correlation": i}}
        for i in range(30)
    ]  # fmt: skip
    runs = _kernels_twice(write_trace(tmp_path / "trace.json.gz", events), "pandas", tmp_path / "c")
    assert [r.stdout.strip().splitlines()[-1] for r in runs] == ["PANDAS", "NO-PANDAS"]
    assert runs[0].stdout.splitlines()[:4] == runs[1].stdout.splitlines()[:4]
    table = pd.read_csv(io.StringIO("\n".join(runs[1].stdout.splitlines()[:-1])))
    assert table["Instances"].tolist() == [10, 10, 10] and table["Total Time (ns)"].sum() == 150_000


def test_corrupt_file_is_rebuilt(a100_export: Path, a100_expected: Path, cache_dir: Path) -> None:
    with open_trace(a100_export) as t:
        kernel_summary(t)
    bad = next(cache_dir.glob("*/kernels.duration.parquet"))
    bad.write_bytes(b"PAR1 not really")
    trace = open_trace(a100_export)
    pd.testing.assert_frame_equal(as_printed(kernel_summary(trace)), oracle(a100_expected, "gpukernsum"))
    assert trace.source_reads == {"CUPTI_ACTIVITY_KIND_KERNEL": 1}
    trace.close()
    assert bad.stat().st_size > 100  # written again


def test_changed_export_and_new_reader_rebuild(
    a100_export: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine.sqlite"
    shutil.copyfile(a100_export, mine)
    with open_trace(mine) as t:
        kernel_summary(t)
    first = {p.name for p in cache_dir.iterdir() if p.is_dir()}
    os.utime(mine, ns=(time.time_ns(), time.time_ns() + 10**9))  # the export changed
    with open_trace(mine) as t:
        kernel_summary(t)
        assert t.source_reads  # read from the export again
    second = {p.name for p in cache_dir.iterdir() if p.is_dir()}
    assert len(second) == 1 and second != first  # the stale entry is gone
    monkeypatch.setattr(analysis.readers, "NSYS_VERSION", "nsys-test")
    with open_trace(mine) as t:
        kernel_summary(t)
        assert t.source_reads
    assert len({p.name for p in cache_dir.iterdir() if p.is_dir()} - second) == 1


def test_unwritable_cache_folder_says_so_once(a100_export: Path, tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(blocker / "cache"))
    trace = open_trace(a100_export)
    table = kernel_summary(trace)
    assert table["Total Time (ns)"].tolist() == [88_573_480]
    said = [n for n in table.attrs["notes"] if "not writable" in n]
    assert len(said) == 1 and str(blocker / "cache") in said[0]


def test_a_cache_folder_of_spaces_is_a_usage_error(
    a100_export: Path, tmp_path: Path, monkeypatch, cache_dir: Path
) -> None:
    """HARNESS_CACHE_DIR of spaces made a folder of that name in the current folder (set empty, it is unset,
    as every HARNESS_* variable)."""
    from typer.testing import CliRunner

    from harness.cli import app

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("HARNESS_CACHE_DIR", " ")
    r = CliRunner().invoke(app, ["kernels", str(a100_export)])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "error: HARNESS_CACHE_DIR=' ' is blank: give a folder, or unset it for the default\n"
    assert list(here.iterdir()) == []


def test_a_cache_folder_with_a_line_end_is_a_usage_error(tmp_path: Path, monkeypatch) -> None:
    """HARNESS_CACHE_DIR read with its line end made a folder whose name ends in one."""
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.setenv("HARNESS_CACHE_DIR", f"{tmp_path}/cache\n")
    r = CliRunner().invoke(app, ["cache", "--max-size", "1GB"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith(f"error: HARNESS_CACHE_DIR='{tmp_path}/cache\\n' holds a control character")
    assert r.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_cache_folder_under_home_is_expanded(tmp_path: Path, monkeypatch) -> None:
    """HARNESS_CACHE_DIR='~/cache' (quoted: the shell leaves the ~) made a folder named ~ in the current
    folder, one `rm -rf ~` away from the user's home."""
    from typer.testing import CliRunner

    from harness.cli import app

    here, home = tmp_path / "here", tmp_path / "home"
    here.mkdir()
    home.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HARNESS_CACHE_DIR", "~/cache")
    r = CliRunner().invoke(app, ["cache", "--max-size", "1GB"])
    assert r.exit_code == 0, r.output
    assert list(here.iterdir()) == []
    assert (home / "cache").is_dir()


def test_two_commands_fill_one_entry_at_once(a100_export: Path, a100_expected: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "c")}
    cmd = [sys.executable, "-m", "harness", "summary", str(a100_export), "--format", "csv"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outs[0][0] == outs[1][0] == outs[2][0]
    warm = subprocess.run(cmd, capture_output=True, env=env, timeout=120)
    assert warm.stdout == outs[0][0]
    assert not list((tmp_path / "c").glob("*/.tmp-*"))


def test_least_recently_used_entries_go_first(a100_export: Path, tmp_path: Path, cache_dir: Path) -> None:
    copies = []
    for i in range(3):
        copies.append(tmp_path / f"r{i}.sqlite")
        shutil.copyfile(a100_export, copies[-1])
        with open_trace(copies[-1]) as t:
            kernel_summary(t)
        time.sleep(0.02)
    cache = Cache(cache_dir)
    entries = cache.entries()
    assert [Path(e.source).name for e in entries] == ["r2.sqlite", "r1.sqlite", "r0.sqlite"]
    with open_trace(copies[0]) as t:  # r0 used again: now r1 is the oldest
        kernel_summary(t)
    one = entries[0].size_bytes
    cache.set_limit(2 * one + one // 2)
    assert cache.evict() > 0
    assert sorted(Path(e.source).name for e in cache.entries()) == ["r0.sqlite", "r2.sqlite"]


def test_a_new_entry_keeps_the_cache_under_its_limit(
    a100_export: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies = []
    for i in range(3):
        copies.append(tmp_path / f"r{i}.sqlite")
        shutil.copyfile(a100_export, copies[-1])
    with open_trace(copies[0]) as t:
        kernel_summary(t)
    one = Cache(cache_dir).entries()[0].size_bytes
    monkeypatch.setenv("HARNESS_CACHE_LIMIT", str(one + one // 2))  # room for one entry, not two
    for path in copies[1:]:
        time.sleep(0.02)
        with open_trace(path) as t:
            kernel_summary(t)
    # each new entry pushed out the least recently used one; the newest is there
    assert [Path(e.source).name for e in Cache(cache_dir).entries()] == ["r2.sqlite"]


def test_cache_command_lists_and_clears(a100_export: Path, cache_dir: Path) -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    with open_trace(a100_export) as t:
        kernel_summary(t)
    runner = CliRunner()
    listed = runner.invoke(app, ["cache", "--format", "csv"])
    assert listed.exit_code == 0
    rows = pd.read_csv(__import__("io").StringIO(listed.stdout))
    assert rows["Source"].tolist() == [str(a100_export.resolve())]
    assert rows["Size (bytes)"].iloc[0] > 0
    cleared = runner.invoke(app, ["cache", "--clear"])
    assert cleared.exit_code == 0 and "removed 1 cache entry (" in cleared.stderr
    assert Cache(cache_dir).entries() == []
    bad = runner.invoke(app, ["cache", "--max-size", "lots"])
    assert bad.exit_code == 2 and "not a size" in bad.stderr


def test_clearing_a_reports_entries_clears_the_exports_it_is_read_through(
    cpu_export: Path, tmp_path: Path, cache_dir: Path
) -> None:
    """`cache --clear --report run.nsys-rep` removes what reading that report kept: the entry of its export
    made into the cache folder and that export, or the entry of the export beside it; nothing of another
    export's. `--report` without `--clear` is refused, not ignored."""
    from typer.testing import CliRunner

    from analysis.front.reading import read_tables
    from harness.cli import app

    def exported(path: Path, target: Path) -> None:
        shutil.copyfile(cpu_export, target)

    runner = CliRunner()
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    read_tables("nvtx", [report], export=exported)
    read_tables("nvtx", [cpu_export])
    made = list((cache_dir / "exports").glob("*.sqlite"))
    assert len(made) == 1 and len(Cache(cache_dir).entries()) == 2
    cleared = runner.invoke(app, ["cache", "--clear", "--report", str(report)])
    assert cleared.exit_code == 0 and "removed 1 cache entry (" in cleared.stderr, cleared.output
    assert not made[0].exists()
    assert [e.source for e in Cache(cache_dir).entries()] == [str(cpu_export.resolve())]

    beside = tmp_path / "old.sqlite"
    shutil.copyfile(cpu_export, beside)
    old = tmp_path / "old.nsys-rep"
    old.write_bytes(b"older than the export beside it")
    os.utime(old, (1_000_000_000, 1_000_000_000))
    read_tables("nvtx", [old])
    assert len(Cache(cache_dir).entries()) == 2
    cleared = runner.invoke(app, ["cache", "--clear", "--report", str(old)])
    assert cleared.exit_code == 0 and "removed 1 cache entry (" in cleared.stderr, cleared.output
    assert [e.source for e in Cache(cache_dir).entries()] == [str(cpu_export.resolve())]

    alone = runner.invoke(app, ["cache", "--report", str(old)])
    assert alone.exit_code == 2 and "--report goes with --clear" in alone.stderr


def test_clearing_the_entries_of_a_path_that_is_no_file_says_so(tmp_path: Path, cache_dir: Path) -> None:
    """A misspelt --report cleared nothing: said as such, not only as "removed 0 cache entries"."""
    from typer.testing import CliRunner

    from harness.cli import app

    gone = tmp_path / "nonexist.sqlite"
    cleared = CliRunner().invoke(app, ["cache", "--clear", "--report", str(gone)])
    assert cleared.exit_code == 0, cleared.output
    assert (
        cleared.stderr.splitlines()[-1]
        == f"warning: no file at {gone}, and no cache entry of it: check the path"
    )


def test_no_cache_writes_nothing(a100_export: Path, cache_dir: Path) -> None:
    kernel_summary(open_trace(a100_export, cache=False))
    assert not cache_dir.exists()


def test_parse_size() -> None:
    assert parse_size("5GB") == 5_000_000_000
    assert parse_size("1.5 GiB") == 1_610_612_736
    assert parse_size("2048") == 2048
    with pytest.raises(ValueError, match="not a size"):
        parse_size("5 parsecs")


def test_a_size_is_read_exactly_and_one_past_what_is_counted_is_refused(cache_dir: Path) -> None:
    """`--max-size 99999999999999999999999TB` went through a float: stored as
    99,999,999,999,999,996,863,366,107,917,975,552 bytes; 1e400 ended in a traceback."""
    assert parse_size("9007199254740993") == 9_007_199_254_740_993  # a float rounds it to ...992
    assert parse_size("8388607.5TiB") == 8_388_607 * 1024**4 + 1024**4 // 2
    assert parse_size(str(2**63 - 1)) == 2**63 - 1
    for text in ("99999999999999999999999TB", "1e400", str(2**63), "8388608TiB"):
        with pytest.raises(ValueError, match=r"too large a size: .* is past 9,223,372,036,854,775,807 bytes"):
            parse_size(text)
    from typer.testing import CliRunner

    from harness.cli import app

    huge = CliRunner().invoke(app, ["cache", "--max-size", "99999999999999999999999TB"])
    assert huge.exit_code == 2 and huge.output == (
        "error: too large a size: '99999999999999999999999TB' is past 9,223,372,036,854,775,807 bytes, the "
        "most a file system counts\n"
    )
    assert not cache_dir.exists()


def test_nvtx_columns_read_apart_equal_the_whole_frame(cache_dir: Path) -> None:
    """The nsys reader reads the NVTX columns a table asks for (one scan each time): names resolved from
    texts and text ids, domains, payloads and open ranges' ends, each alone, equal the whole frame."""
    export = need(SHARED_NSYS / "ext" / "dlprof_norelu" / "report.sqlite")
    whole = nsys_open.open_nsys(export).nvtx_ranges()
    assert len(whole) == 82 and whole["name"].nunique() > 10
    for column in ("start", "end", "global_tid", "pushpop", "payload", "name", "domain"):
        alone = nsys_open.open_nsys(export).nvtx_ranges([column])
        assert list(alone.columns) == ["range_id", column]
        pd.testing.assert_series_equal(alone[column], whole[column])
    # and through the cache: a column read later is added to the entry, the ones before are not read again
    with open_trace(export) as first:
        names = first.frame("nvtx", ["name"])
    with open_trace(export) as second:
        both = second.frame("nvtx", ["name", "payload"])
        assert second.source_reads == {"NVTX_EVENTS": 1}
    assert both["name"].tolist() == names["name"].tolist() == whole["name"].tolist()
    with open_trace(export) as third:
        third.frame("nvtx", ["name", "payload"])
        assert third.source_reads == {}


def test_writes_scan_the_cache_folder_once_while_there_is_room(
    a100_export: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filling many entries scans the folder (every file of every entry) once per process while the
    cache is far from its limit, and a new entry finds its source's entries before in one listing, never
    by reading every entry: a scan per write made 1,024 exports read in one command quadratic in time."""
    scans = []
    entries = Cache.entries
    monkeypatch.setattr(Cache, "entries", lambda self: scans.append(1) or entries(self))
    copies = []
    for i in range(4):
        copies.append(tmp_path / f"run.rank{i}.sqlite")
        shutil.copyfile(a100_export, copies[-1])
        with open_trace(copies[-1]) as t:
            kernel_summary(t)
    assert len(scans) == 1
    os.utime(copies[0], ns=(time.time_ns(), time.time_ns() + 10**9))  # a new version of rank 0
    with open_trace(copies[0]) as t:
        kernel_summary(t)
    assert len(scans) == 1
    monkeypatch.setattr(Cache, "entries", entries)
    listed = Cache(cache_dir).entries()
    assert sorted(Path(e.source).name for e in listed) == [c.name for c in copies]  # its entry before gone
    one = max(e.size_bytes for e in listed)
    monkeypatch.setenv("HARNESS_CACHE_LIMIT", str(4 * one + one // 2))  # room for four entries
    spare = tmp_path / "run.rank4.sqlite"
    shutil.copyfile(a100_export, spare)
    with open_trace(spare) as t:  # the fifth passes the limit: scanned, the least recently used out
        kernel_summary(t)
    assert sorted(Path(e.source).name for e in Cache(cache_dir).entries()) == [
        f"run.rank{i}.sqlite" for i in (0, 2, 3, 4)
    ]


@pytest.mark.parametrize("name", ["ext/torchrun_2gpu", "a100-saxpy-mpi", "cpu-train"])
def test_nvtx_cached_a_chunk_at_a_time_reads_back_as_the_whole_frame(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The NVTX ranges go to the cache in one scan, a chunk at a time (each chunk's names its own
    dictionary; payloads with nulls): read back whole they are the frame the reader reads whole, the
    names' categories sorted as it makes them, and a block at a time the same values."""
    export = need(SHARED_NSYS / name / "report.sqlite")
    columns = ["start", "end", "global_tid", "pushpop", "payload", "name", "domain"]
    monkeypatch.setattr(nsys_sql, "CHUNK_ROWIDS", 1000)
    with open_trace(export) as cold:
        assert cold.stage({"nvtx": columns})
        assert cold.source_reads == {"NVTX_EVENTS": 1}
    whole = nsys_open.open_nsys(export).nvtx_ranges()[columns]
    with open_trace(export) as warm:
        cached = warm.frame("nvtx", columns)
        blocks = list(warm.blocks("nvtx", columns, rows=5000))
        assert warm.source_reads == {}
    ok = (whole["end"] >= whole["start"]).to_numpy()
    pd.testing.assert_frame_equal(cached, whole[ok].reset_index(drop=True))
    for column in columns:
        parts = [pd.Series(b[column]) for b in blocks]
        got = pd.concat(parts, ignore_index=True) if column not in ("name", "domain") else pd.Series(
            pd.api.types.union_categoricals([b[column] for b in blocks], ignore_order=True)
        )  # fmt: skip
        assert got.astype(object).tolist() == cached[column].astype(object).tolist(), column
