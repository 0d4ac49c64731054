"""Many exports, one analysis: combined tables equal the statistics of the concatenated rows, --by-rank
blocks equal the single-export tables, ranks from file names, refusals and notes, the Dask path."""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED_NSYS, missing, need
from export_data import derive, distinct_copy
from kineto_data import trace_path
from reading import flat
from typer.testing import CliRunner

import analysis.trace.multi as multi
from analysis.stats import round_half_up
from analysis.tables import combine, run_task
from analysis.trace.multi import expand, label_sources, rank_in_name
from analysis.trace.multi_combine import compress_ranks
from analysis.trace.multi_run import run_tasks
from harness.cli import app

runner = CliRunner()
DLPROF = SHARED_NSYS / "ext" / "dlprof_norelu"


def run(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


def csv(result) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return pd.read_csv(io.StringIO(result.stdout))


@pytest.fixture(scope="module")
def dlprof() -> Path:
    path = DLPROF / "report.sqlite"
    need(path)
    return path


@pytest.fixture(scope="module")
def pair(dlprof: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two different ranks: the dlprof export, and the same with every kernel made longer by 0..600 ns."""
    folder = tmp_path_factory.mktemp("pair")
    r0 = folder / "job.rank0.sqlite"
    shutil.copyfile(dlprof, r0)
    r1 = derive(
        dlprof,
        folder / "job.rank1.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + (rowid % 7) * 100",
    )
    return r0, r1


def kernel_durations(path: Path) -> pd.DataFrame:
    """The oracle's rows, straight from SQLite: kernel name and duration."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute(
            "SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName"
        ).fetchall()
    finally:
        con.close()
    return pd.DataFrame(rows, columns=["Name", "duration"])


def oracle_by_name(rows: pd.DataFrame) -> pd.DataFrame:
    g = rows.groupby("Name")["duration"]
    out = g.agg(["sum", "size", "mean", "median", "min", "max", "std"]).fillna({"std": 0.0})
    return pd.DataFrame(
        {
            "Total Time (ns)": out["sum"],
            "Instances": out["size"],
            "Avg (ns)": round_half_up(out["mean"]),
            "Med (ns)": round_half_up(out["median"]),
            "Min (ns)": out["min"],
            "Max (ns)": out["max"],
            "StdDev (ns)": round_half_up(out["std"]),
        }
    )


def test_combined_kernels_equal_the_statistics_of_the_concatenated_rows(pair: tuple[Path, Path]) -> None:
    ours = csv(run("kernels", *pair, "--by", "name", "--format", "csv")).set_index("Name")
    want = oracle_by_name(pd.concat([kernel_durations(p) for p in pair], ignore_index=True))
    assert set(ours.index) == set(want.index) and len(ours) == 26
    pd.testing.assert_frame_equal(ours[want.columns].loc[want.index], want, check_dtype=False)
    assert (ours["Ranks"] == "0-1").all()
    assert ours["Time (%)"].sum() == pytest.approx(100, abs=0.2)
    totals = ours["Total Time (ns)"].to_numpy()
    assert (np.diff(totals) <= 0).all()  # largest first


def test_two_copies_double_instances_and_total_and_keep_avg(dlprof: Path, tmp_path: Path) -> None:
    for r in (0, 1):
        distinct_copy(dlprof, tmp_path / f"run.rank{r}.sqlite")
    one = csv(run("kernels", tmp_path / "run.rank0.sqlite", "--format", "csv"))
    both = csv(run("kernels", tmp_path, "--format", "csv"))  # a folder
    key = ["Name", "GridXYZ", "BlockXYZ"]
    one, both = one.set_index(key).sort_index(), both.set_index(key).sort_index()
    assert (both["Instances"] == 2 * one["Instances"]).all()
    assert (both["Total Time (ns)"] == 2 * one["Total Time (ns)"]).all()
    for col in ("Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "Time (%)"):
        assert (both[col] == one[col]).all(), col


def test_combined_nvtx_over_two_copies(cpu_export: Path, tmp_path: Path) -> None:
    for r in (0, 1):
        distinct_copy(cpu_export, tmp_path / f"train.rank{r}.sqlite")
    one = csv(run("nvtx", tmp_path / "train.rank0.sqlite", "--format", "csv")).set_index("Range")
    both = csv(run("nvtx", str(tmp_path / "train.rank*.sqlite"), "--format", "csv")).set_index("Range")
    assert list(both.columns[:2]) == ["Ranks", "Time (%)"]
    assert both.loc["forward", "Instances"] == 2 * one.loc["forward", "Instances"] == 16
    assert both.loc["forward", "Total Time (ns)"] == 2 * one.loc["forward", "Total Time (ns)"]
    assert both.loc["forward", "Avg (ns)"] == one.loc["forward", "Avg (ns)"]


def test_by_rank_blocks_equal_the_single_export_tables(pair: tuple[Path, Path]) -> None:
    blocks = csv(run("kernels", *reversed(pair), "--by-rank", "--format", "csv"))
    assert list(blocks["Rank"].unique()) == [0, 1]  # sorted by rank, whatever the input order
    key = ["Name", "GridXYZ", "BlockXYZ"]
    for rank, path in enumerate(pair):
        single = csv(run("kernels", path, "--format", "csv")).set_index(key).sort_index()
        block = blocks[blocks["Rank"] == rank].drop(columns="Rank").set_index(key).sort_index()
        pd.testing.assert_frame_equal(block, single)


def test_duplicate_ranks_are_refused(dlprof: Path, tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        distinct_copy(dlprof, tmp_path / sub / "run.rank0.sqlite")
    result = run("kernels", tmp_path / "a" / "run.rank0.sqlite", tmp_path / "b" / "run.rank0.sqlite")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 0 is given twice" in lines[0], result.stderr
    # the two files have one name: they are told apart by their folders
    a, b = tmp_path / "a" / "run.rank0.sqlite", tmp_path / "b" / "run.rank0.sqlite"
    assert f"({a} and {b})" in lines[0]
    other = tmp_path / "b" / "job.rank0.sqlite"
    distinct_copy(dlprof, other)
    result = run("kernels", a, other)
    assert "rank 0 is given twice (run.rank0.sqlite and job.rank0.sqlite)" in result.stderr


def test_the_same_file_twice_is_refused(dlprof: Path) -> None:
    result = run("kernels", dlprof, dlprof)
    assert result.exit_code == 1 and "given twice" in result.stderr


def test_a_copy_of_an_export_is_refused(
    dlprof: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cp a b`: the same export under two names counts twice in every combined table unless refused, as
    the same path given twice is; given alone, or in a folder, or beside an export of the same size whose
    bytes differ (another rank), it is not refused; files of different sizes are never read to compare."""
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copyfile(dlprof, a)
    shutil.copyfile(dlprof, b)
    result = run("kernels", a, b)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {b} is a copy of {a} (the same bytes): each export counts once"
    ]
    assert "is a copy of" in run("kernels", tmp_path).stderr
    (tmp_path / "other").mkdir()
    other = distinct_copy(dlprof, tmp_path / "other" / "c.sqlite")
    assert other.stat().st_size == a.stat().st_size
    assert csv(run("kernels", a, other, "--format", "csv"))["Instances"].sum() == 2 * 46

    def never(path: Path, whole: bool) -> bytes:
        raise AssertionError(f"{path} read though no other export has its size")

    monkeypatch.setattr(multi, "_digest", never)
    assert run("kernels", a, need(SHARED_NSYS / "ext" / "fuser_report1" / "report.sqlite")).exit_code == 0


def test_mixed_programs_get_a_note(cpu_export: Path, a100_export: Path, tmp_path: Path) -> None:
    shutil.copyfile(cpu_export, tmp_path / "x.rank0.sqlite")
    shutil.copyfile(a100_export, tmp_path / "y.rank1.sqlite")
    result = run("nvtx", tmp_path, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert (
        "different programs: /home/user/.venv/bin/python (rank 0); ./saxpy-mpi-cuda (rank 1)" in result.stderr
    )
    assert "point to 2 runs (x, y)" in result.stderr


def test_ranks_on_different_gpus_get_a_note(a100_export: Path, tmp_path: Path) -> None:
    """One program's ranks recorded on an A100 and on an H100: the kernels merge, and a note says so."""
    distinct_copy(a100_export, tmp_path / "job.rank0.sqlite")
    h100 = "UPDATE TARGET_INFO_GPU SET name = 'NVIDIA H100 80GB HBM3'"
    derive(a100_export, tmp_path / "job.rank1.sqlite", h100)
    result = run("kernels", tmp_path, "--format", "csv")
    assert csv(result)["Instances"].sum() == 10
    said = "different GPUs: NVIDIA A100-SXM4-40GB (rank 0); NVIDIA H100 80GB HBM3 (rank 1)"
    assert said in " ".join(result.stderr.split())
    other = distinct_copy(a100_export, tmp_path / "job.rank2.sqlite")
    same = run("kernels", tmp_path / "job.rank0.sqlite", other)
    assert same.exit_code == 0 and "GPUs" not in same.stderr


def test_missing_ranks_get_a_note(dlprof: Path, tmp_path: Path) -> None:
    for r in (0, 2):
        distinct_copy(dlprof, tmp_path / f"run.rank{r}.sqlite")
    result = run("kernels", tmp_path, "--format", "csv")
    assert result.exit_code == 0
    assert "2 of 3 ranks given: rank 1 missing" in result.stderr


def test_no_rank_labels_rows_by_file(dlprof: Path, tmp_path: Path) -> None:
    distinct_copy(dlprof, tmp_path / "first.sqlite")
    distinct_copy(dlprof, tmp_path / "second.sqlite")
    blocks = csv(
        run("kernels", tmp_path / "second.sqlite", tmp_path / "first.sqlite", "--by-rank", "--format", "csv")
    )
    assert list(blocks["Source"].unique()) == ["second.sqlite", "first.sqlite"]  # the order given
    over = run("kernels", tmp_path, "--format", "csv")
    assert csv(over)["Sources"].eq("2 of 2").all()
    assert "rows are labelled by file" in over.stderr


def test_api_memops_osrt_launch_summary_combine(a100_export: Path, cpu_export: Path, tmp_path: Path) -> None:
    for r in (0, 1):
        distinct_copy(a100_export, tmp_path / f"g.rank{r}.sqlite")
    api = csv(run("api", tmp_path, "--format", "csv")).set_index("Name")
    single = csv(run("api", tmp_path / "g.rank0.sqlite", "--format", "csv")).set_index("Name")
    assert (api["Num Calls"] == 2 * single.loc[api.index, "Num Calls"]).all()
    memops = run("memops", tmp_path, "--format", "csv")
    assert memops.exit_code == 0 and "[CUDA memcpy HtoD]" in memops.stdout
    launch = csv(run("launch", tmp_path, "--format", "csv"))
    assert list(launch["Rank"].unique()) == [0, 1] and launch.columns[0] == "Rank"
    summary = run("summary", tmp_path, "--format", "json")
    assert summary.exit_code == 0, summary.output
    assert "CUDA kernels (gpukernsum)" in summary.stdout
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    for r in (0, 1):
        distinct_copy(cpu_export, cpu / f"c.rank{r}.sqlite")
    osrt = csv(run("osrt", cpu, "--format", "csv"))
    one = csv(run("osrt", cpu / "c.rank0.sqlite", "--format", "csv"))
    assert osrt["Num Calls"].sum() == 2 * one["Num Calls"].sum()


def test_an_export_without_kernels_adds_no_rows_and_a_note(
    cpu_export: Path, a100_export: Path, tmp_path: Path
) -> None:
    """A CPU-only capture among GPU ones recorded no kernels: it adds no rows, one note names it (as `nsys
    stats` says a report "does not contain CUDA kernel data"), and the others' table is made; alone, or where
    no export has kernels, the command is refused as for one export. A damaged export stays refused."""
    gpu = distinct_copy(a100_export, tmp_path / "gpu.sqlite")
    cpu = distinct_copy(cpu_export, tmp_path / "cpu.sqlite")
    alone = csv(run("kernels", gpu, "--format", "csv"))
    note = "note: no CUDA kernel data in cpu.sqlite: no rows from it (profile on a GPU with --trace=cuda)"
    over = run("kernels", tmp_path, "--format", "csv")
    rows = csv(over)
    assert rows["Sources"].eq("1 of 2").all()
    pd.testing.assert_frame_equal(rows.drop(columns="Sources"), alone)
    assert over.stderr.splitlines().count(note) == 1
    for fmt in ("table", "json"):
        said = run("kernels", gpu, cpu, "--format", fmt)
        assert said.exit_code == 0 and note in flat(said.output), said.output
    assert len(json.loads(run("kernels", gpu, cpu, "--format", "json").stdout)) == len(alone)

    one = run("kernels", cpu)
    assert (
        one.exit_code == 1
        and one.stderr == f"error: no CUDA kernel data in {cpu}: profile on a GPU with --trace=cuda\n"
    )
    (tmp_path / "none").mkdir()
    other = distinct_copy(cpu_export, tmp_path / "none" / "cpu2.sqlite")
    none = run("kernels", cpu, other)
    assert none.exit_code == 1 and none.stderr == (
        f"error: no CUDA kernel data in any of the 2 exports ({cpu}, {other}): "
        "profile on a GPU with --trace=cuda\n"
    )
    broken = tmp_path / "none" / "broken.sqlite"
    broken.write_bytes(a100_export.read_bytes()[:100_000])
    refused = run("kernels", gpu, cpu, broken)
    text = flat(refused.stderr)
    assert refused.exit_code == 1 and "1 of 3 exports could not be read, so no table was made" in text
    assert f"{broken} is truncated" in text and f"Read: {gpu}, {cpu}." in text


def test_rank_in_name_and_ranges() -> None:
    assert rank_in_name("run.rank3.sqlite") == 3
    assert rank_in_name("trace_rank_12.json.gz") == 12
    assert rank_in_name("rank7.nsys-rep") == 7
    assert rank_in_name("frankly.sqlite") is None
    assert compress_ranks([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_folder_prefers_the_export_beside_its_report(dlprof: Path, tmp_path: Path) -> None:
    distinct_copy(dlprof, tmp_path / "r.rank0.sqlite")
    report = tmp_path / "r.rank0.nsys-rep"
    report.write_bytes(b"report")
    os.utime(report, (1e9, 1e9))  # exported after it was recorded
    distinct_copy(dlprof, tmp_path / "r.rank10.sqlite")
    distinct_copy(dlprof, tmp_path / "r.rank2.sqlite")
    assert [p.name for p in expand([tmp_path])] == ["r.rank0.sqlite", "r.rank2.sqlite", "r.rank10.sqlite"]


def test_folder_reads_a_report_recorded_again_after_its_export(dlprof: Path, tmp_path: Path) -> None:
    """An export older than the report beside it is of the capture before: the report is read, as when it
    is given alone (exported again), and a note says which export was passed over."""
    old = distinct_copy(dlprof, tmp_path / "r.sqlite")
    os.utime(old, (1e9, 1e9))
    (tmp_path / "r.nsys-rep").write_bytes(b"report")
    notes: list[str] = []
    assert [p.name for p in expand([tmp_path], notes)] == ["r.nsys-rep"]
    assert notes == [
        f"skipped in the folder {tmp_path}: r.sqlite (older than r.nsys-rep beside it: the report is read)"
    ]


def test_folder_keeps_a_trace_and_an_export_of_one_name(dlprof: Path, tmp_path: Path) -> None:
    """run.sqlite and run.json.gz are two captures (nsys's and the PyTorch profiler's): each is read."""
    distinct_copy(dlprof, tmp_path / "run.sqlite")
    shutil.copyfile(trace_path("alexnet"), tmp_path / "run.json.gz")
    assert [p.name for p in expand([tmp_path])] == ["run.json.gz", "run.sqlite"]


def test_missing_dask_says_how_to_install(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # what an environment without Dask sees
    result = run("kernels", *pair, "--dask", "tcp://127.0.0.1:1")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: --dask needs Dask: pip install 'harness[dask]'"


@pytest.mark.slow
def test_dask_local_cluster_gives_the_local_table(pair: tuple[Path, Path]) -> None:
    try:
        import distributed
    except ImportError:
        missing("Dask's distributed is not installed: `make setup` installs the test extras")
    paths = list(pair)
    options = {"names": "demangled", "by": "shape", "range_name": None, "hta": False}
    local = run_tasks(run_task, paths, "kernels", options, True, jobs=2)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as c:
        remote = run_tasks(run_task, paths, "kernels", options, True, dask=c.scheduler_address)
        with distributed.Client(c) as client:
            workers = set(client.run(os.getpid).values())
        # each export was read by one of the cluster's two worker processes, which says its peak RSS
        assert len(workers) == 2 and os.getpid() not in workers
        assert [p.path for p in remote] == [str(p) for p in paths] and all(p.error is None for p in remote)
        assert all(p.info["pid"] in workers and p.info["peak_rss_kb"] > 0 for p in remote)
        cli = run("nvtx", *paths, "--dask", c.scheduler_address, "--format", "csv")
    tables = []
    for parts in (local, remote):
        sources = label_sources(paths, parts)
        tables.append(combine("kernels", parts, sources, options=options).tables[0][1])
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert cli.exit_code == 0, cli.output
    pd.testing.assert_frame_equal(csv(cli), csv(run("nvtx", *paths, "--format", "csv")))


def test_kineto_ranks_come_from_the_traces() -> None:
    control, nccl = trace_path("diff-control"), trace_path("nccl")  # each missing fails under CI
    result = run("kernels", control, nccl, "--by-rank", "--by", "name", "--format", "csv")
    assert list(csv(result)["Rank"].unique()) == [0, 3]  # distributedInfo.rank, in rank order
    assert "different world sizes: 8 (rank 0); 2 (rank 3)" not in result.stderr
    assert "different world sizes: 2 (rank 0); 8 (rank 3)" in result.stderr
    assert "2 of 8 ranks given: rank 1, 2, 4, 5, 6, 7 missing" in result.stderr


def test_a_trace_s_own_rank_wins_over_its_file_name(tmp_path: Path) -> None:
    """The control trace records rank 3 and the nccl trace rank 0: copies named the other way round keep
    the ranks they record, as `breakdown` takes them; the file name only stands in where a trace has none."""
    control, nccl = tmp_path / "job.rank0.json.gz", tmp_path / "job.rank3.json.gz"
    shutil.copyfile(trace_path("diff-control"), control)
    shutil.copyfile(trace_path("nccl"), nccl)
    result = run("kernels", control, nccl, "--by-rank", "--by", "name", "--format", "csv")
    assert result.exit_code == 0, result.output
    ranks = csv(result)[["Rank", "Name"]].drop_duplicates("Rank")
    assert list(ranks["Rank"]) == [0, 3]
    alone = run("kernels", control, "--by", "name", "--format", "csv")
    assert set(csv(result).query("Rank == 3")["Name"]) == set(csv(alone)["Name"])


def test_a_missing_export_among_several_is_said_missing(tmp_path: Path) -> None:
    from analysis.errors import ExportError
    from analysis.trace.multi import expand

    there = tmp_path / "run.rank0.sqlite"
    there.write_bytes(b"")
    with pytest.raises(ExportError, match=r"^no such export: .*run\.rank1\.sqlite$"):
        expand([there, tmp_path / "run.rank1.sqlite"])
    assert expand([tmp_path / "run.rank1.sqlite"]) == [tmp_path / "run.rank1.sqlite"]  # opened, then said


def test_a_worker_sends_back_rows_grouped(dlprof: Path) -> None:
    """A worker's share of a summary combined exactly is its rows grouped: each group's keys once and its
    values, narrowed, in row order; no frame of every row (1,024 exports' frames took the command past
    500 MB)."""
    import pickle

    from analysis.joins.runtime import runtime_calls
    from analysis.trace.multi import Grouped
    from analysis.trace.opening import open_trace

    part = run_task(str(dlprof), "summary", {"by": "op"}, False)
    api = part.pieces["api"].rows
    assert isinstance(api, Grouped) and api.keys == ["Name"] and set(api.values) == {"duration"}
    calls = runtime_calls(open_trace(dlprof, cache=False))
    names = calls["name_id"].map(calls.attrs["names"])
    durations = (calls["end"] - calls["start"]).to_numpy()
    assert sorted(g[0] for g in api.groups) == sorted(names.unique())
    for (name,), values in zip(api.groups, api.values["duration"], strict=True):
        assert values.dtype.itemsize <= 4
        assert values.tolist() == durations[(names == name).to_numpy()].tolist()  # row order kept
    kernels = part.pieces["kernels"].rows
    assert isinstance(kernels, Grouped) and kernels.keys == ["Name"]  # summed by name over exports
    assert pickle.loads(pickle.dumps(api)).groups == api.groups


def test_a_note_every_export_says_is_said_once(dlprof: Path, cpu_export: Path, tmp_path: Path) -> None:
    """Over several exports each one's notes were said once per export, prefixed with its rank, then once
    more unprefixed: the NVTX grouping line three times over two ranks. A note every export says is said
    once; one that only some say keeps its rank."""
    from analysis.front.reading import read_tables
    from analysis.nvtx_names import GROUPING_LINE

    for rank in (0, 1):
        distinct_copy(dlprof, tmp_path / f"run.rank{rank}.sqlite")
    shutil.copyfile(cpu_export, tmp_path / "cpu.rank2.sqlite")  # names without PyTorch's fields
    both = read_tables("nvtx", sorted(tmp_path.glob("run.rank*.sqlite")), jobs=1, by_rank=True, cache=False)
    assert [n for n in both.notes if GROUPING_LINE["op"] in n] == [GROUPING_LINE["op"]]
    three = read_tables("nvtx", sorted(tmp_path.glob("*.rank*.sqlite")), jobs=1, by_rank=True, cache=False)
    said = [n for n in three.notes if GROUPING_LINE["op"] in n]
    assert said == [f"rank 0: {GROUPING_LINE['op']}", f"rank 1: {GROUPING_LINE['op']}"]


@pytest.mark.parametrize("command", ["launch", "nvtx-gpu"])
def test_a_stacked_table_over_several_exports_says_what_each_one_says(command: str, tmp_path: Path) -> None:
    """`launch` and `nvtx-gpu` stack each export's finished table: the note its table carried (the A100
    export's 38 runtime calls recorded twice, counted once) was lost over several exports, while `api`
    and one export alone said it."""
    a100 = need(SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite")
    other = need(SHARED_NSYS / "ext" / "dlprof_norelu" / "report.sqlite")
    alone = runner.invoke(app, [command, str(a100), "--format", "csv", "--no-cache"])
    twice = [line for line in alone.stderr.splitlines() if "recorded twice under one correlationId" in line]
    assert alone.exit_code == 0 and len(twice) == 1
    both = runner.invoke(app, [command, str(other), str(a100), "--format", "csv", "--no-cache"])
    assert both.exit_code == 0, both.output
    assert f"note: {a100}: {twice[0].removeprefix('note: ')}" in both.stderr.splitlines()


def test_summary_over_several_exports_says_an_exports_note_once() -> None:
    """`summary` of cpu-train and the A100 export said the A100's note twice: labelled with its export, and
    again bare (carried by the one table only it fills); once, labelled, now."""
    cpu = need(SHARED_NSYS / "cpu-train" / "report.sqlite")
    a100 = need(SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite")
    result = runner.invoke(app, ["summary", str(cpu), str(a100), "--format", "csv", "--no-cache"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "recorded twice under one correlationId" in line]
    assert len(said) == 1 and said[0].startswith(f"note: {a100}: 38 CUDA runtime calls")


def test_a_narrow_terminal_keeps_the_rank_of_each_block(pair: tuple[Path, Path]) -> None:
    """`kernels --by-rank` on 80 columns left the Rank column out first ("4 of 10 columns left out: Rank,
    …"): two blocks of rows, nothing saying which rank each is."""
    result = runner.invoke(
        app, ["kernels", *map(str, pair), "--by-rank", "--top", "2"], env={"COLUMNS": "80", "LINES": "60"}
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "Name" in line)
    assert header.split("┃")[1].strip() == "Rank"
    ranks = [line.split("│")[1].strip() for line in result.stdout.splitlines() if line.startswith("│")]
    assert ranks == ["0", "0", "1", "1"]
    assert "left out to fit 80 columns: Rank" not in flat(result.stderr)


def test_stacked_tables_keep_their_order_and_integer_ids(h100_export: Path, a100_export: Path) -> None:
    """`nvtx-gpu` of a phase-mode export and a thread-mode one printed "Do the phases add up?" before the
    ranges (its pieces sorted by name), and PID and TID as floats (1230493.0) for the phase rows' blanks."""
    import json

    result = runner.invoke(app, ["nvtx-gpu", str(h100_export), str(a100_export), "--format", "json"])
    assert result.exit_code == 0, result.output
    titles = list(json.loads(result.stdout))
    assert titles[0].startswith("GPU time per NVTX range") and titles[1].startswith("Do the phases add up?")
    printed = runner.invoke(app, ["nvtx-gpu", str(h100_export), str(a100_export), "--format", "csv"])
    ranges = printed.stdout.split("\n\n")[0].split("\n", 1)[1]
    rows = pd.read_csv(io.StringIO(ranges), dtype=str, keep_default_na=False)
    thread = rows[rows["PID"] != ""]
    assert thread[["PID", "TID"]].values.tolist() == [["1230493", "1230493"]]
    assert (rows[rows["PID"] == ""]["Range"]).tolist() == ["forward", "backward", "optimizer"]
