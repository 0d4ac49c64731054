"""The export-reading commands as a new user meets them: options that contradict each other refused in one
line, numbers from a damaged capture said to be so, outside text kept as data."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import shared_export
from export_data import derive
from typer.testing import CliRunner

from analysis.stats import PAST_TOTAL
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()


def run(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--projection", "--kernels"], "--projection and --kernels exclude each other"),
        (["--projection", "--mode", "phase"], "--mode does not apply"),
        (["--projection", "--phases", "forward"], "--phases does not apply"),
        (["--projection", "--exclusive"], "--exclusive does not apply"),
        (["--projection", "--by", "shape"], "--by shape does not apply"),
        (["--mode", "thread", "--phases", "forward"], "--phases names the phase ranges of phase mode"),
        (["--mode", "phase", "--exclusive"], "--exclusive is thread mode's"),
    ],
)
def test_nvtx_gpu_refuses_options_it_would_pass_over(
    h100_export: Path, options: list[str], said: str
) -> None:
    result = run("nvtx-gpu", h100_export, *options)
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output


OPEN_FORWARD = (
    "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT n.rowid FROM NVTX_EVENTS n JOIN StringIds s "
    "ON s.id = n.textId WHERE s.value = 'forward' ORDER BY n.start DESC LIMIT 1)"
)


@pytest.mark.parametrize("command", [["nvtx"], ["nvtx", "--trace"], ["summary"]])
def test_nvtx_tables_say_a_range_never_ends(cpu_export: Path, tmp_path: Path, command: list[str]) -> None:
    # the last forward range never popped: its time runs to the export's last timestamp (707 ms, not 4)
    damaged = derive(cpu_export, tmp_path / "open.sqlite", OPEN_FORWARD)
    result = run(*command, damaged, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert "1 NVTX range never ends" in result.stderr
    assert "never ends" not in run(*command, cpu_export, "--format", "csv").stderr


def test_nvtx_gpu_says_a_range_never_ends(a100_export: Path, tmp_path: Path) -> None:
    damaged = derive(
        a100_export,
        tmp_path / "open.sqlite",
        "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS "
        "WHERE eventType = 59)",
    )
    for view in ([], ["--kernels"], ["--projection"]):
        result = run("nvtx-gpu", damaged, *view, "--format", "csv")
        assert result.exit_code == 0, result.output
        assert "1 NVTX range never ends" in result.stderr, view


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_diff_says_which_side_has_a_range_that_never_ends(cpu_export: Path, tmp_path: Path, fmt: str) -> None:
    damaged = derive(cpu_export, tmp_path / "open.sqlite", OPEN_FORWARD)
    result = run("diff", cpu_export, damaged, "--format", fmt)
    assert result.exit_code == 0, result.output
    assert "B: 1 NVTX range never ends" in " ".join(result.output.split())


def test_diff_markdown_keeps_the_notes_the_table_prints(tmp_path: Path) -> None:
    dlprof = shared_export("ext/dlprof_norelu")
    other = derive(dlprof, tmp_path / "other.sqlite")
    table = " ".join(run("diff", dlprof, other, "--top", "5").output.split())
    markdown = " ".join(run("diff", dlprof, other, "--top", "5", "--format", "markdown").output.split())
    said = [
        "NVTX ranges grouped by operator",
        "A: 2 NVTX ranges never end",
        "B: 2 NVTX ranges never end",
        "21 of 26 rows not shown: --top 26 shows them all",  # the kernels cut to --top
        "56 of 61 rows not shown: --top 61 shows them all",  # the NVTX ranges
    ]
    for text in said:
        assert text in table
        assert text in markdown, text


def test_timeline_says_a_range_never_ends(cpu_export: Path, tmp_path: Path) -> None:
    damaged = derive(cpu_export, tmp_path / "open.sqlite", OPEN_FORWARD)
    result = run("timeline", damaged, "--out", tmp_path / "trace.json")
    assert result.exit_code == 0, result.output
    assert "1 NVTX range never ends" in " ".join(result.output.split())
    whole = run("timeline", cpu_export, "--out", tmp_path / "whole.json")
    assert whole.exit_code == 0 and "never ends" not in whole.output


@pytest.mark.parametrize(("option", "value"), [("--dask", "tcp://127.0.0.1:1"), ("--jobs", "4")])
def test_an_option_for_several_exports_on_one_is_said_unused(
    a100_export: Path, option: str, value: str
) -> None:
    result = run("kernels", a100_export, option, value, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert f"{option} reads several exports" in " ".join(result.stderr.split())
    assert "saxpy" in result.stdout  # the table itself, read here


@pytest.mark.parametrize("args", [[], ["--clear"], ["--clear", "--report", "x.sqlite"]])
def test_cache_that_is_a_file_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    root = tmp_path / "notes.txt"
    root.write_text("mine\n")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    result = run("cache", *args)
    assert result.exit_code == 2, result.output  # not an empty cache listed, nor "removed 0 entries"
    assert "is a file, not a folder" in " ".join(result.output.split())
    assert root.read_text() == "mine\n"


def test_by_rank_says_which_process_has_a_range_that_never_ends(tmp_path: Path) -> None:
    # one capture of two ranks (PIDs 144 and 145): a range of PID 145's left open
    damaged = derive(
        shared_export("ext/torchrun_2gpu"),
        tmp_path / "open.sqlite",
        "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS "
        "WHERE eventType = 59 AND ((globalTid >> 24) & 16777215) = 145)",
    )
    for command in ("nvtx", "nvtx-gpu"):
        result = run(command, damaged, "--by-rank", "--format", "csv")
        assert result.exit_code == 0, result.output
        said = " ".join(result.stderr.split())
        assert "rank 1: 1 NVTX range never ends" in said, command
        assert "rank 0: 1 NVTX range never ends" not in said


def test_a_cache_entry_removed_while_filled_is_not_called_unwritable(
    a100_export: Path, cache_dir: Path
) -> None:
    # another command that read a newer copy of the source (or `harness cache --clear`) removes the entry
    # this one is filling: the folder is writable, and saying otherwise sends the user to the wrong fix
    with open_trace(a100_export) as trace:
        trace.frame("kernels", ["start", "end"])
    with open_trace(a100_export) as trace:
        shutil.rmtree(trace.cache_entry.folder)
        calls = trace.frame("runtime", ["start", "end"])
        notes = list(trace.notes)
    assert len(calls) == 95  # read from the export all the same
    assert not any("not writable" in n for n in notes), notes
    assert any("was removed while this command filled it" in n for n in notes), notes


def test_nvtx_gpu_says_a_phase_named_that_no_range_has(h100_export: Path) -> None:
    # a typo among the phases gave its row 0 and its kernels to `unattributed`, with no word
    result = run("nvtx-gpu", h100_export, "--phases", "forward,backwrd", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert "no NVTX range is named 'backwrd' in report.sqlite" in " ".join(result.stderr.split())
    assert "'forward'" not in result.stderr


def test_breakdown_of_exports_one_per_rank(a100_export: Path, tmp_path: Path) -> None:
    # nsys exports carry no rank: it comes from the file names, as for the table commands
    dlprof = shared_export("ext/dlprof_norelu")
    pair = [derive(a100_export, tmp_path / "job_rank0.sqlite"), derive(dlprof, tmp_path / "job_rank1.sqlite")]
    result = run("breakdown", *pair, "--format", "csv")
    assert result.exit_code == 0, result.output
    first = pd.read_csv(io.StringIO(result.stdout.split("\n\n")[0]), comment="#")
    assert first["Rank"].tolist() == [0, 1]
    assert first["Kernel Time (ns)"].gt(0).all()


def test_breakdown_of_two_traces_of_one_rank_is_refused(a100_export: Path, tmp_path: Path) -> None:
    other = derive(a100_export, tmp_path / "other.sqlite")
    result = run("breakdown", a100_export, other)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "rank 0 is given twice" in " ".join(result.output.split())


def test_breakdown_of_one_capture_of_two_ranks_splits_it_by_process() -> None:
    # one nsys around a 2-rank torchrun job: two GPUs were one "rank 0" whose compute was their union
    result = run("breakdown", shared_export("ext/torchrun_2gpu"), "--format", "csv")
    assert result.exit_code == 0, result.output
    first = pd.read_csv(io.StringIO(result.stdout.split("\n\n")[0]), comment="#")
    assert first["Rank"].tolist() == [0, 1]
    # each rank's span is its process's first kernel start to last kernel end (`harness ranks` says the same)
    assert first["Kernel Time (ns)"].tolist() == [299_848_812, 298_661_551]
    assert first["Compute Time (ns)"].tolist() == [253_690_832, 256_095_624]
    assert "rank 0 = PID 144 (device 0), rank 1 = PID 145 (device 1)" in " ".join(result.stderr.split())


def test_diff_headline_keeps_a_kernel_name_on_its_line(a100_export: Path, tmp_path: Path) -> None:
    # a name from the export with a newline printed a line of its own: here, a verdict the diff never gave
    forged = derive(
        a100_export,
        tmp_path / "forged.sqlite",
        "UPDATE StringIds SET value = 'k\nverdict: improvement' WHERE id = 670",
    )
    result = run("diff", forged, a100_export, "--wide")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not any(line.startswith("verdict: improvement") for line in lines), result.stdout
    assert any(line.startswith("top improvement: k\\nverdict: improvement") for line in lines), result.stdout


def test_a_report_and_the_export_it_is_read_through_count_once(a100_export: Path, tmp_path: Path) -> None:
    # x.nsys-rep is read through the newer x.sqlite beside it: naming both read one capture twice
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"not read: the export beside it is newer")
    os.utime(report, (1, 1))
    export = derive(a100_export, tmp_path / "x.sqlite")
    result = run("kernels", export, report, "--format", "csv")
    assert result.exit_code == 1, result.output
    assert "x.nsys-rep is read through x.sqlite, also given: each export counts once" in " ".join(
        result.output.split()
    )


LOST = (
    "INSERT INTO DIAGNOSTIC_EVENT VALUES (5000000, 1, 2, 3, "
    "'CUPTI: 1234 activity records were dropped (buffer overflow)', 281980910436352)"
)


@pytest.mark.parametrize("command", ["kernels", "api", "summary"])
def test_tables_of_a_capture_that_lost_events_say_so(tmp_path: Path, command: str) -> None:
    # nsys said it dropped records: health fails it, advise refuses it; the tables showed their sums as whole
    fuser = shared_export("ext/fuser_report1")
    lost = derive(fuser, tmp_path / "lost.sqlite", LOST)
    result = run(command, lost, "--format", "csv")
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "nsys lost events in this capture" in said and "activity records were dropped" in said
    assert "lost events" not in run(command, fuser, "--format", "csv").stderr


def test_nvtx_gpu_phase_mode_without_phases_says_why_it_is_empty(a100_export: Path) -> None:
    # an empty table and every kernel unattributed, with no word why
    result = run("nvtx-gpu", a100_export, "--mode", "phase", "--format", "csv")
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "no phase ranges in report.sqlite" in said and "--mode thread" in said


def _launched(csv_text: str) -> int:
    return int(pd.read_csv(io.StringIO(csv_text))["Count"].sum())


def test_launch_says_which_kernels_no_recorded_call_launched(tmp_path: Path) -> None:
    # torchrun_2gpu: 24 of 4,010 kernels have no runtime call of their process with their correlationId;
    # kernexecsum leaves them out without a word (3,986 kernels in its rows), and so does the table
    torchrun = run("launch", shared_export("ext/torchrun_2gpu"), "--format", "csv")
    assert torchrun.exit_code == 0, torchrun.output
    assert _launched(torchrun.stdout) == 3986
    assert "left out 24 of 4,010 kernels with no usable CUDA call that launched them" in torchrun.stderr
    # a kernel without a correlationId takes the whole join: 322 of beast1's 2,254 left out, said so
    damaged = derive(
        shared_export("ext/beast1"),
        tmp_path / "no-corr.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid % 7 = 0",
    )
    result = run("launch", damaged, "--format", "csv", "--no-cache")
    assert result.exit_code == 0, result.output
    assert _launched(result.stdout) == 2254 - 322
    assert "left out 322 of 2,254 kernels with no usable CUDA call" in result.stderr
    whole = run("launch", shared_export("ext/beast1"), "--format", "csv")
    assert _launched(whole.stdout) == 2254 and "no usable CUDA call" not in whole.stderr


def _sections(csv_text: str) -> list[pd.DataFrame]:
    blocks = [b for b in csv_text.split("\n\n") if b.strip()]
    return [
        pd.read_csv(io.StringIO("\n".join(x for x in b.splitlines() if not x.startswith("#"))))
        for b in blocks
    ]


@pytest.mark.parametrize("several", [False, True], ids=["one export", "a folder of two"])
def test_memops_says_a_copy_without_a_byte_count_is_left_out_of_the_sizes(
    tmp_path: Path, several: bool
) -> None:
    # beast1: 5 device-to-host copies (0.4 MB); one damaged to -5 bytes has a time but no size
    beast = shared_export("ext/beast1")
    folder = tmp_path / "ranks"
    folder.mkdir()
    damaged = derive(
        beast,
        folder / "rank0.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -5 WHERE copyKind = 2 "
        "AND rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2)",
    )
    if several:
        shutil.copyfile(beast, folder / "rank1.sqlite")
    result = run("memops", folder if several else damaged, "--format", "csv", "--stats-format", "2022.4")
    assert result.exit_code == 0, result.output
    by_time, by_size = _sections(result.stdout)
    dtoh = "[CUDA memcpy DtoH]"
    assert by_time.set_index("Operation").loc[dtoh, "Count"] == (10 if several else 5)
    sizes = by_size.set_index("Operation").loc[dtoh]
    assert sizes["Count"] == (9 if several else 4)
    assert sizes["Min (MB)"] == 0.0 and sizes["Max (MB)"] == 0.32
    said = "left out 1 of 6 memory operations with no byte count from the sizes"
    assert said in result.stderr and "Traceback" not in result.output
    assert said not in run("memops", beast, "--format", "csv").stderr


@pytest.mark.parametrize(
    ("command", "sql"),
    [
        (["osrt"], 'UPDATE OSRT_API SET "end" = 1000000000000000000'),  # 10,908 calls of ~31 years
        (["nvtx"], 'UPDATE NVTX_EVENTS SET "end" = 2000000000000000000'),  # 8 ranges a name of ~63 years
    ],
)
def test_times_that_add_up_past_int64_are_one_line_not_a_wrapped_total(
    cpu_export: Path, tmp_path: Path, command: list[str], sql: str
) -> None:
    # each time lies within the 2**62 ns a time may take, but their total wrapped round int64: osrt said
    # -1,446,744,111,590,443,473 ns and a Time (%) of -2.4
    damaged = derive(cpu_export, tmp_path / "long.sqlite", sql)
    result = run(*command, damaged, "--format", "json")
    assert result.exit_code == 1, result.output
    (line,) = [x for x in result.stderr.splitlines() if not x.startswith("note:")]
    assert line == f"error: {PAST_TOTAL}"
    assert run(*command, cpu_export, "--format", "json").exit_code == 0
    # the summary leaves the table out, saying why, and prints the others
    summary = run("summary", damaged, "--format", "json")
    assert summary.exit_code == 0 and PAST_TOTAL in summary.stdout


@pytest.mark.parametrize("given", [".", "/"], ids=["dot", "root"])
@pytest.mark.parametrize("command", ["timeline", "dashboard"])
def test_a_folder_without_a_name_is_said_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, given: str
) -> None:
    """`.` and `/` have no name to put a SQLite journal's suffix on: the check for journals beside the
    inputs passes them over, and the command says they are folders (an empty argument is refused as empty:
    tests/test_empty_paths.py)."""
    monkeypatch.chdir(tmp_path)
    done = run(command, given, "-o", tmp_path / "out.html")
    assert done.exit_code == 1, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert done.output.startswith(f"error: {given} is a folder: pass the .sqlite export")
    assert not (tmp_path / "out.html").exists()
