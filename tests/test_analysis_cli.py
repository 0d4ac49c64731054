"""The analysis commands: output equal to the oracles in csv/json, one-line errors, no heavy imports."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from export_data import derive, oracle, with_harness_ranges
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()


def run(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


def test_kernels_csv_equals_oracle(a100_export: Path, a100_expected: Path) -> None:
    result = run("kernels", a100_export, "--format", "csv")
    assert result.exit_code == 0, result.output
    ours = pd.read_csv(io.StringIO(result.stdout))
    pd.testing.assert_frame_equal(ours, oracle(a100_expected, "gpukernsum"))


def test_kernels_table_shows_the_saxpy_row(a100_export: Path) -> None:
    result = run("kernels", a100_export)
    assert result.exit_code == 0
    assert "saxpy(" in result.stdout and "88.573" in result.stdout  # Total Time in ms


def test_kernels_options(a100_export: Path) -> None:
    base = json.loads(run("kernels", a100_export, "--base", "--by", "name", "--format", "json").stdout)
    assert [r["Name"] for r in base] == ["saxpy"] and base[0]["Instances"] == 5
    mangled = json.loads(run("kernels", a100_export, "--mangled", "--format", "json").stdout)
    assert mangled[0]["Name"] == "_Z5saxpyPdS_S_di"
    both = run("kernels", a100_export, "--base", "--mangled")
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_long_names_kept_whole_in_csv_and_json(a100_export: Path, tmp_path: Path) -> None:
    name = "void at::native::kernel<" + "float, " * 30 + "int>(float *)"
    long = derive(
        a100_export, tmp_path / "long.sqlite", f"UPDATE StringIds SET value = '{name}' WHERE id = 670"
    )
    assert json.loads(run("kernels", long, "--format", "json").stdout)[0]["Name"] == name
    assert name in run("kernels", long, "--format", "csv").stdout
    assert name not in run("kernels", long).stdout and "…" in run("kernels", long).stdout


def test_nvtx_and_osrt_on_cpu_export(cpu_export: Path, cpu_expected: Path) -> None:
    nvtx = pd.read_csv(io.StringIO(run("nvtx", cpu_export, "--format", "csv").stdout))
    pd.testing.assert_frame_equal(nvtx, oracle(cpu_expected, "nvtxsum"))
    trace = json.loads(run("nvtx", cpu_export, "--trace", "--format", "json").stdout)
    assert len(trace) == 32 and trace[1]["NameTree"] == "--forward"
    osrt = json.loads(run("osrt", cpu_export, "--top", "2", "--format", "json").stdout)
    assert [r["Name"] for r in osrt] == ["futex", "read"]


def test_api_memops_launch(a100_export: Path) -> None:
    api = run("api", a100_export, "--format", "json")
    assert api.exit_code == 0
    assert json.loads(api.stdout)[0] == {
        "Time (%)": 53.2, "Total Time (ns)": 374343896, "Num Calls": 15, "Avg (ns)": 24956259.7,
        "Med (ns)": 19177586.0, "Min (ns)": 18149477, "Max (ns)": 37626048, "StdDev (ns)": 9228463.1,
        "Name": "cudaMemcpy",
    }  # fmt: skip
    assert "recorded twice under one correlationId" in api.stderr
    memops = json.loads(run("memops", a100_export, "--format", "json").stdout)
    assert [r["Count"] for r in memops["GPU memory operations by time"]] == [10, 5]
    launch = json.loads(run("launch", a100_export, "--format", "json").stdout)
    assert launch[0]["Count"] == 5 and launch[0]["API Name"] == "cudaLaunchKernel"


def test_nvtx_gpu_modes(a100_export: Path, tmp_path: Path) -> None:
    thread = run("nvtx-gpu", a100_export, "--kernels", "--format", "csv")
    assert thread.exit_code == 0
    rows = pd.read_csv(io.StringIO(thread.stdout))
    assert rows["Total Time (ns)"].tolist() == [88_573_480]
    harness_like = with_harness_ranges(a100_export, tmp_path / "h.sqlite")
    phase = json.loads(run("nvtx-gpu", harness_like, "--format", "json").stdout)
    assert [r["Range"] for r in phase["GPU time per NVTX range (phase mode) in h.sqlite"]] == ["forward"]
    check = {r["Phase"]: r for r in phase["Do the phases add up? (measured steps)"]}
    assert check["all kernels"]["Kernels"] == 4 and check["unattributed"]["Kernels"] == 0


def test_summary_both_fixtures(a100_export: Path, cpu_export: Path) -> None:
    a100 = json.loads(run("summary", a100_export, "--format", "json").stdout)
    skipped = {s["table"]: s["reason"] for s in a100.pop("skipped")}
    assert len(a100) == 7 and a100["CUDA kernels (gpukernsum)"][0]["Total Time (ns)"] == 88_573_480
    assert set(skipped) == {"Do the phases add up?", "OS runtime (osrtsum)"}
    cpu = run("summary", cpu_export)
    assert cpu.exit_code == 0
    assert "NVTX ranges (nvtxsum)" in cpu.stdout and "OS runtime (osrtsum)" in cpu.stdout
    assert "skipped CUDA kernels" in cpu.stderr


def one_line_error(result, *fragments: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_bad_inputs_one_line_each_file_untouched(a100_export: Path, cpu_export: Path, tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("hello")
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(a100_export.read_bytes()[:500_000])
    emptied = derive(a100_export, tmp_path / "empty.sqlite", "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    cases = [
        (tmp_path / "missing.sqlite", ("no such export",)),
        (text, ("is not an SQLite file",)),
        (cut, ("is truncated",)),
        (emptied, ("no CUDA kernel data in", "profile on a GPU with --trace=cuda")),
        (cpu_export, ("no CUDA kernel data in",)),
    ]
    for path, fragments in cases:
        before = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        one_line_error(run("kernels", path), *fragments)
        after = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        assert before == after


def test_a_newline_in_a_file_name_keeps_the_error_one_line(cpu_export: Path, tmp_path: Path) -> None:
    """A file name holding a newline split the error in two lines (the first `error: no such export: miss`,
    the second the rest of the name): analysis's errors are one line, the newline shown as `\\n`."""
    missing = tmp_path / "miss\ning.sqlite"
    text = tmp_path / "no\ntes.sqlite"
    text.write_text("hello")
    nocuda = tmp_path / "cpu\nonly.sqlite"
    nocuda.write_bytes(cpu_export.read_bytes())
    for command, path, said in (
        ("nvtx", missing, "no such export:"),
        ("health", text, "is not an SQLite file"),
        ("kernels", nocuda, "no CUDA kernel data in"),
    ):
        one_line_error(run(command, path), said, str(path).replace("\n", "\\n"))


def test_nsys_rep_without_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 128)
    monkeypatch.setenv("HARNESS_NSYS", str(tmp_path / "no-nsys"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run("kernels", rep)
    one_line_error(result, str(rep))
    assert rep.read_bytes() == b"\x00" * 128
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nsys-rep"]


def test_a_report_read_through_the_export_beside_it_says_so(
    cpu_export: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nsys stats X.nsys-rep` reads a newer X.sqlite beside it without a word; every command that reads a
    report names the export it read instead, on stderr with the other notes (in the notebook: the frame's
    notes)."""
    from analysis import front

    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 128)
    os.utime(rep, (1_000_000_000, 1_000_000_000))  # older than the export beside it
    beside = tmp_path / "run.sqlite"
    beside.write_bytes(cpu_export.read_bytes())
    monkeypatch.setenv("HARNESS_NSYS", str(tmp_path / "no-nsys"))  # nothing is exported: the export is read
    said = (
        f"note: read {beside}, the export beside run.nsys-rep and newer than it (remove it to have the "
        "report exported instead)"
    )
    for args in (
        ("nvtx", rep, "--format", "json"),
        ("health", rep, "--format", "json"),
        ("advise", rep, "--format", "json"),
        ("ranks", rep, "--format", "json"),
        ("dashboard", rep, "--out", tmp_path / "page.html"),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert said in result.stderr.splitlines(), (args, result.stderr)
    assert json.loads(run("nvtx", rep, "--format", "json").stdout)[0]["Instances"] == 8
    assert said[len("note: ") :] in front.open(rep).table("nvtx").attrs["notes"]
    assert said[len("note: ") :] in front.open(rep).health().attrs["notes"]
    assert not run("nvtx", beside, "--format", "json").stderr  # the export named: nothing to say
    beside.write_bytes(cpu_export.read_bytes()[:3000])  # an export cut short: the error names the report
    for command in ("nvtx", "health", "ranks"):
        result = run(command, rep)
        assert result.exit_code == 1 and "is truncated" in result.stderr
        assert result.stderr.count("\n") == 1 and said[len("note: ") :] in result.stderr


@pytest.mark.slow
def test_reports_are_exported_into_the_cache_never_beside_them(
    nsys_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.execution import nsys

    script = tmp_path / "ranges.py"
    script.write_text(
        "import nvtx\nfor i in range(3):\n    with nvtx.annotate('step', payload=i):\n        pass\n"
    )
    out = tmp_path / "prof"
    opts = nsys.ProfileOptions(output=out, trace=("nvtx",), python_backtrace=None, export_sqlite=False)
    assert nsys.profile(nsys.probe(Path(nsys_bin)), opts, [sys.executable, str(script)]).returncode == 0
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)
    users = tmp_path / "users"
    users.mkdir()
    rep = users / "run.nsys-rep"
    out.with_suffix(".nsys-rep").rename(rep)
    qdrep = users / "old.qdrep"  # nsys before 2021.4 named reports .qdrep
    qdrep.write_bytes(rep.read_bytes())
    for report in (rep, qdrep):
        result = run("nvtx", report, "--format", "json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)[0]["Instances"] == 3
    page = run("dashboard", rep, "--out", tmp_path / "dash.html")
    assert page.exit_code == 0, page.output
    assert (tmp_path / "dash.html").stat().st_size > 100_000
    assert sorted(p.name for p in users.iterdir()) == ["old.qdrep", "run.nsys-rep"]


def test_commands_import_no_torch_or_plotly(a100_export: Path) -> None:
    code = (
        "import sys\nfrom harness.cli import main\n"
        "sys.argv = ['harness', 'summary', sys.argv[1], '--format', 'csv']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'plotly') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(a100_export)], capture_output=True, text=True, env=dict(os.environ)
    )
    assert "HEAVY []" in done.stderr, done.stderr


def test_a_newline_in_a_file_name_keeps_notes_and_warnings_one_line(cpu_export: Path, tmp_path: Path) -> None:
    """A file name holding a newline split a note in two lines (`note: no findings in a`, then the rest of
    the name): notes and warnings quote it with the newline shown as `\\n`, as errors do."""
    named = tmp_path / "a\nb.sqlite"
    named.write_bytes(cpu_export.read_bytes())
    result = run("advise", named)
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "no findings in" in line]
    assert len(said) == 1 and said[0].startswith("note: "), result.stderr
    assert "a\\nb.sqlite" in said[0]
    assert not any(line.startswith("b.sqlite") for line in result.output.splitlines())
