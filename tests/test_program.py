"""`harness profile -- CMD`: a real C program emitting NVTX3 ranges, profiled for real under nsys."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import missing
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore

runner = CliRunner()

DEMO_C = r"""
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <time.h>

static void pause_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

int main(void) {
    nvtxRangePushA("init");
    pause_ms(2);
    nvtxRangePop();
    for (int i = 0; i < 3; i++) {
        nvtxRangePushA("compute");
        pause_ms(5);
        nvtxRangePop();
    }
    nvtxRangePushA("finish");
    pause_ms(1);
    nvtxRangePop();
    puts("nvtx_demo done");
    return 3;
}
"""


def nvtx_include(nsys_bin: str) -> Path:
    """The folder holding nvtx3/ (header-only NVTX3): the nsys installation ships it, as does CUDA."""
    real = Path(nsys_bin).resolve()
    for parent in list(real.parents)[:4]:
        for found in sorted(parent.glob("**/nvtx/include/nvtx3/nvToolsExt.h")):
            return found.parent.parent
    cuda = Path("/usr/local/cuda/include")
    if (cuda / "nvtx3" / "nvToolsExt.h").is_file():
        return cuda
    missing(f"NVTX3 headers (nvtx3/nvToolsExt.h) not found near {real} nor in {cuda}")


@pytest.fixture
def nvtx_demo(tmp_path: Path, nsys_bin: str) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        missing("gcc not found: the test builds a small C program")
    src = tmp_path / "nvtx_demo.c"
    src.write_text(DEMO_C)
    exe = tmp_path / "nvtx_demo"
    include = nvtx_include(nsys_bin)
    subprocess.run([gcc, "-O1", f"-I{include}", "-o", str(exe), str(src), "-ldl"], check=True)
    return exe


@pytest.mark.slow
def test_profile_program_stores_run_and_tables(
    nvtx_demo: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    prof_dir = tmp_path / "profiles"
    args = ["profile", "--name", "demo", "--profile-dir", str(prof_dir), "--format", "json"]
    args += ["--", "./nvtx_demo"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 3, result.output  # the program's exit code

    tables = json.loads(result.stdout)
    nvtx = {row["Range"]: row for row in tables["NVTX ranges (nvtxsum)"]}
    assert {name: row["Instances"] for name, row in nvtx.items()} == {"init": 1, "compute": 3, "finish": 1}
    assert nvtx["compute"]["Min (ns)"] >= 5_000_000  # each compute range sleeps 5 ms
    assert nvtx["compute"]["Style"] == "PushPop"

    runs = ResultsStore(tmp_db, readonly=True).runs()
    assert len(runs) == 1
    run = runs.iloc[0]
    assert (run["model"], run["mode"], run["profiler"], run["status"]) == ("demo", "program", "nsys", "error")
    assert run["nsys_sqlite"] == str(prof_dir / f"{run['run_id']}.sqlite")
    assert Path(run["nsys_sqlite"]).is_file() and Path(run["nsys_rep"]).is_file()
    stored = ResultsStore(tmp_db, readonly=True).get(run["run_id"])
    assert stored.error == "the program exited with code 3"
    assert stored.summary["command"] == ["./nvtx_demo"] and stored.summary["exit_code"] == 3

    listed = runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False)
    assert listed.exit_code == 0
    [row] = json.loads(listed.stdout)
    assert (row["model"], row["profiler"]) == ("demo", "nsys")


@pytest.mark.slow
@pytest.mark.elsewhere
def test_profile_program_table_output_and_exit_zero(tmp_path: Path, tmp_db: str, nsys_bin: str) -> None:
    """Through the real console script in a fresh process: a program exiting 0 is stored as ok."""
    prof_dir = tmp_path / "profiles"
    cmd = [sys.executable, "-m", "harness", "profile", "--profile-dir", str(prof_dir), "--", "true"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_db, nsys_bin))
    assert done.returncode == 0, done.stderr
    assert "under nsys" in done.stderr and ": ok" in done.stderr
    run = ResultsStore(tmp_db, readonly=True).runs().iloc[0]
    assert (run["model"], run["mode"], run["status"]) == ("true", "program", "ok")


@pytest.mark.slow
def test_failed_program_shows_its_last_lines(tmp_path: Path, tmp_db: str, nsys_bin: str) -> None:
    prof_dir = tmp_path / "profiles"
    script = "echo first; echo 'boom: [red]x[/red]' >&2; exit 5"
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "profile",
        "--profile-dir",
        str(prof_dir),
        "--",
        "sh",
        "-c",
        script,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_db, nsys_bin))
    assert done.returncode == 5, done.stderr
    tail = done.stderr.split("note: last lines of its output:\n", 1)[1]
    assert tail.startswith("first\nboom: [red]x[/red]\n")  # as printed, never read as markup
    assert "Generated:" not in tail
    run = ResultsStore(tmp_db, readonly=True).runs().iloc[0]
    assert (run["model"], run["status"]) == ("sh", "error")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_profile_as_data_names_the_run_and_its_files(
    tmp_path: Path, tmp_db: str, nsys_bin: str, fmt: str
) -> None:
    """What the notes on stderr tell people (the run stored, the program's exit code, the report and the
    export) is in csv and json too: a script had the capture's tables and no way to find its run or files."""
    prof_dir = tmp_path / "profiles"
    args = ["profile", "--name", "five", "--profile-dir", str(prof_dir), "--format", fmt]
    result = runner.invoke(app, [*args, "--", "sh", "-c", "echo out; exit 5"], catch_exceptions=False)
    assert result.exit_code == 5, result.output
    (stored,) = ResultsStore(tmp_db, readonly=True).runs().to_dict("records")
    if fmt == "json":
        tables = json.loads(result.stdout)
        (run,) = tables["run"]
        files = {row["kind"]: row["path"] for row in tables["files"]}
    else:  # titled blocks: "# TITLE", then the table's csv
        blocks = dict(block.split("\n", 1) for block in result.stdout.split("\n\n"))
        (run,) = csv.DictReader(io.StringIO(blocks["# run"]))
        run["exit code"] = int(run["exit code"])
        files = {row["kind"]: row["path"] for row in csv.DictReader(io.StringIO(blocks["# files"]))}
    assert (run["run"], run["status"], run["exit code"]) == (stored["run_id"], "error", 5)
    assert run["error"] == "the program exited with code 5"
    assert files["report"] == stored["nsys_rep"] and files["export"] == stored["nsys_sqlite"]
    assert Path(files["export"]).is_file() and Path(files["output"]).read_text().startswith("out\n")


def test_profile_without_program_is_one_line_error(tmp_db: str) -> None:
    result = runner.invoke(app, ["profile"], catch_exceptions=False)
    assert result.exit_code == 2
    assert "no program given" in result.stderr and "Traceback" not in result.output


def test_a_missing_program_is_said_before_a_missing_nsys(
    tmp_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the user gave wrong on the command line (no program, or one not there) is said first, as a
    usage error, on a machine with or without an nsys."""
    monkeypatch.setenv("HARNESS_NSYS", str(tmp_path / "no-nsys"))
    for args in (["profile"], ["profile", "--", str(tmp_path / "nope")]):
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(("error: no program given", "error: program ")), result.stderr


def test_profile_missing_program_is_one_line_error(tmp_db: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["profile", "--", str(tmp_path / "nope")], catch_exceptions=False)
    assert result.exit_code == 2
    assert "is not an executable file" in result.stderr


@pytest.mark.parametrize(
    "args", [["profile", "--profile-dir", "", "--", "true"], ["run", "char", "--nsys", "--profile-dir", ""]]
)
def test_an_empty_profile_dir_is_refused(
    tmp_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """`--profile-dir "$DIR"` with DIR unset: refused, where the files went to the current folder."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: --profile-dir is empty: give a folder\n"
    assert list(work.iterdir()) == []


def _env(db: str, nsys_bin: str) -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "HARNESS_DB": db, "HARNESS_NSYS": nsys_bin, "PYTHONPATH": repo}


@pytest.mark.slow
def test_ctrl_c_stores_the_program_as_interrupted(tmp_path: Path, nsys_bin: str) -> None:
    """A terminal's Ctrl-C to a real harness process: nsys keeps what it recorded, the run is stored as
    interrupted, the exit code is 130 and nothing the harness started is left running."""
    from procs import marked, output, start, wait_until

    db = tmp_path / "results.sqlite"
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/sh\ntouch started\nexec sleep 600\n")
    script.chmod(0o755)
    mark = f"profilecmd-{tmp_path.name}"
    proc = start(["profile", "--db", str(db), "--", str(script)], tmp_path, mark, HARNESS_NSYS=nsys_bin)
    wait_until(lambda: (tmp_path / "started").exists(), 120, "the program to start under nsys")
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(300) == 130, output(tmp_path)
    text = output(tmp_path)
    assert "Traceback" not in text and "interrupted" in text
    (run,) = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    assert (run["model"], run["status"], run["profiler"]) == ("long.sh", "interrupted", "nsys")
    assert Path(run["nsys_rep"]).is_file()
    wait_until(lambda: not marked(mark), 60, "every process the harness started to end")


def test_nsys_refusing_its_arguments_stores_nothing(tmp_path: Path, tmp_db: str, nsys_bin: str) -> None:
    args = ["profile", "--profile-dir", str(tmp_path), "--nsys-arg=--no-such-flag", "--", "true"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code != 0
    assert "error: nsys wrote no report; nothing stored" in result.stderr
    assert "--no-such-flag" in result.stderr  # nsys's own words follow
    assert ResultsStore(tmp_db, readonly=True).runs().empty


def test_a_report_named_with_nsys_arg_output_never_writes_over_the_users_files(
    tmp_path: Path, tmp_db: str, nsys_bin: str
) -> None:
    mine = tmp_path / "mine"
    (tmp_path / "mine.nsys-rep").write_text("a report of the user's")
    (tmp_path / "mine.sqlite").write_text("an export of the user's")
    args = ["profile", "--profile-dir", str(tmp_path / "p"), f"--nsys-arg=--output={mine}", "--", "true"]
    runner.invoke(app, args, catch_exceptions=False)
    assert (tmp_path / "mine.nsys-rep").read_text() == "a report of the user's"
    assert (tmp_path / "mine.sqlite").read_text() == "an export of the user's"


@pytest.mark.slow
def test_a_program_ended_by_a_signal_warns_in_its_health(tmp_path: Path, tmp_db: str, nsys_bin: str) -> None:
    """A range still open when the program is killed is not in the export at all: its health says the
    capture lacks what nsys had not yet taken from it, when it runs and when the stored run is judged."""
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, signal, nvtx\n"
        "with nvtx.annotate('done'):\n    pass\n"
        "nvtx.start_range('open')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    args = ["profile", "--profile-dir", str(tmp_path / "p"), "--", sys.executable, str(script)]
    done = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          env=_env(tmp_db, nsys_bin))  # fmt: skip
    assert done.returncode == 128 + signal.SIGKILL, done.stderr
    # what else the capture lacks depends on what nsys took before the kill: the check, not the worst
    stored = ResultsStore(tmp_db, readonly=True).get("latest").advice["health"]["checks"]
    ended = [c for c in stored if c["name"] == "program end"]
    assert [c["status"] for c in ended] == ["warn"]
    assert ended[0]["evidence"].startswith("the program was ended by signal 9")
    judged = subprocess.run([sys.executable, "-m", "harness", "health", "latest"], capture_output=True,
                            text=True, env=_env(tmp_db, nsys_bin))  # fmt: skip
    assert "program end warn" in judged.stderr


@pytest.mark.parametrize(
    ("returncode", "signal_number"),
    [(-9, 9), (137, 9), (139, 11), (0, None), (5, None), (255, None), (None, None)],
)
def test_the_signal_that_ended_a_program_from_its_exit_code(
    returncode: int | None, signal_number: int | None
) -> None:
    from harness.core.signals import ended_by

    assert ended_by(returncode) == signal_number


@pytest.mark.parametrize(
    ("returncode", "error"),
    [
        (137, "the program was killed by SIGKILL (signal 9, exit code 137)"),
        (-15, "the program was killed by SIGTERM (signal 15)"),
        (3, "the program exited with code 3"),
        (200, "the program exited with code 200"),
    ],
)
def test_a_program_ended_by_a_signal_is_stored_as_killed(returncode: int, error: str) -> None:
    """nsys gives a program's death by signal N as exit code 128 + N: the run said "exited with code 137"
    while its health said "ended by signal 9"."""
    from harness.execution.nsys import ProfileResult
    from harness.experiments.program import program_result

    prof = ProfileResult(returncode=returncode, rep=None, sqlite=None, qdstrm=None, stderr_tail="")
    result = program_result("p-1", "p", ["./p"], prof, "2023.4.4.54")
    assert (result.status, result.error) == ("error", error)
    assert result.extra["exit_code"] == returncode


def test_a_signal_that_ends_the_wait_to_store_the_run_is_the_exit_code(
    tmp_path: Path, tmp_db: str, nsys_bin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the run waits on a locked database: the run goes to its file, and the command ends
    with the signal's exit code (130), as `harness run` does (it ended 1, as for any unsaved run)."""
    from harness.experiments.program import profile_program
    from harness.store.results import UnsavedRun

    store = ResultsStore(tmp_db)
    kept = tmp_path / "harness-unsaved-true.json"

    def locked(result, **how) -> None:  # type: ignore[no-untyped-def]
        raise UnsavedRun(
            f"run {result.run_id} is not in the results database: SIGINT came while it waited", kept,
            signal.SIGINT, run_id=result.run_id, reason="SIGINT came while it waited",
        )  # fmt: skip

    monkeypatch.setattr(store, "save", locked)
    done = profile_program(["true"], store=store, profile_dir=tmp_path / "prof", nsys_path=nsys_bin)
    assert done.profile.returncode == 0 and done.unsaved
    assert done.exit_code == 130


@pytest.mark.parametrize("dashes", [[], ["--"]])
def test_the_programs_own_options_are_its_own(
    tmp_path: Path, tmp_db: str, nsys_bin: str, monkeypatch: pytest.MonkeyPatch, dashes: list[str]
) -> None:
    """Words after CMD that a harness option also has (`--db`, `--name`, `--format`, `-h`) go to the
    program, with or without `--`: the harness neither takes them nor writes a database they name."""
    from harness.cli import program as cli_program
    from harness.core.errors import UsageError

    given: list[list[str]] = []

    def profile_program(argv: list[str], **kw: object) -> None:
        given.append(list(argv))
        raise UsageError("stop here")

    monkeypatch.setattr(cli_program.programs, "profile_program", profile_program)
    monkeypatch.chdir(tmp_path)
    program = ["true", "--db", "theirs.db", "--name", "x", "--format", "json", "-h"]
    result = runner.invoke(app, ["profile", "--profile-dir", str(tmp_path), *dashes, *program])
    assert given == [program], result.output
    assert not (tmp_path / "theirs.db").exists()


@pytest.mark.parametrize(
    ("nsys_args", "returncode", "error"),
    [
        (
            ["--duration=1"],
            143,
            "nsys ended the program with SIGTERM when its --duration=1 ran out (signal 15, exit code 143); "
            "--nsys-arg=--kill=none lets the program go on past the capture",
        ),
        (
            ["-d", "2", "--kill", "sigkill"],
            137,
            "nsys ended the program with SIGKILL when its -d 2 ran out (signal 9, exit code 137); "
            "--nsys-arg=--kill=none lets the program go on past the capture",
        ),
        (["--duration=1"], 139, "the program was killed by SIGSEGV (signal 11, exit code 139)"),
        (
            ["--duration=1", "--kill=none"],
            143,
            "the program was killed by SIGTERM (signal 15, exit code 143)",
        ),
    ],
)
def test_a_program_ended_by_nsys_duration_says_nsys_ended_it(
    nsys_args: list[str], returncode: int, error: str
) -> None:
    """`--nsys-arg=--duration=N`: nsys sends its --kill signal when N runs out; the run said the program
    "was killed by SIGTERM", as if someone else had."""
    from harness.core.records import program_signal
    from harness.execution.nsys import ProfileResult
    from harness.experiments.program import program_result

    prof = ProfileResult(returncode=returncode, rep=None, sqlite=None, qdstrm=None, stderr_tail="")
    result = program_result("p-1", "p", ["./p"], prof, "2023.4.4.54", nsys_args)
    assert (result.status, result.error) == ("error", error)
    # nsys ends it after its capture stopped: no "program end" check says the capture lacks anything
    by_nsys = error.startswith("nsys ended")
    assert program_signal(result.extra) == (None if by_nsys else returncode - 128)


def test_a_capture_range_that_never_started_is_said(tmp_path: Path, tmp_db: str, nsys_bin: str) -> None:
    """nsys given a capture range the program never opens writes no report and says only "Generated:"; the
    error said that and nothing of why, where `run --nsys` names the range that never started."""
    args = [
        "profile",
        "--profile-dir",
        str(tmp_path),
        "--nsys-arg=--capture-range=cudaProfilerApi",
        "--",
        "true",
    ]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.endswith(
        "error: the capture range never started (--capture-range=cudaProfilerApi): nsys recorded nothing and "
        "wrote no report. With --capture-range=nvtx the range named by --nvtx-capture must be pushed (a name "
        "that is not registered needs NSYS_NVTX_PROFILER_REGISTER_ONLY=0); with cudaProfilerApi the program "
        "must call cudaProfilerStart; nothing stored\n"
    ), result.stderr
    assert ResultsStore(tmp_db, readonly=True).runs().empty


@pytest.mark.slow
def test_a_program_nsys_ended_at_its_duration_is_not_a_broken_capture(
    tmp_path: Path, tmp_db: str, nsys_bin: str
) -> None:
    """nsys stops its capture when --duration runs out, then ends the program: the range still open is in
    the export, to the capture's end. Health warned "ended by signal 15: … an NVTX range still open then is
    not in the export at all", when it ran and when the stored run was judged."""
    script = tmp_path / "long.py"
    script.write_text("import time, nvtx\nnvtx.push_range('open')\ntime.sleep(30)\n")
    args = ["profile", "--profile-dir", str(tmp_path / "p"), "--nsys-arg=--duration=1", "--"]
    done = subprocess.run([sys.executable, "-m", "harness", *args, sys.executable, str(script)],
                          capture_output=True, text=True, env=_env(tmp_db, nsys_bin))  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "nsys ended the program with SIGTERM when its --duration=1 ran out" in done.stderr
    stored = ResultsStore(tmp_db, readonly=True).get("latest").advice["health"]["checks"]
    assert "program end" not in [c["name"] for c in stored]
    judged = subprocess.run([sys.executable, "-m", "harness", "health", "latest"], capture_output=True,
                            text=True, env=_env(tmp_db, nsys_bin))  # fmt: skip
    assert "program end" not in judged.stdout + judged.stderr


@pytest.mark.parametrize(
    ("nsys_args", "said"),
    [
        (["/bin/echo"], "error: --nsys-arg '/bin/echo' is not an nsys flag: nsys would run it as the "
                         "program"),
        (["-o"], "error: --nsys-arg '-o' has no value: nsys would take the program for it; give it "
                 "(--nsys-arg=-o --nsys-arg=VALUE)"),
        (["--trace"], "error: --nsys-arg '--trace' has no value: nsys would take the program for it; give it "
                      "(--nsys-arg=--trace=VALUE)"),
    ],
)  # fmt: skip
def test_an_nsys_arg_that_would_replace_the_program_is_refused(
    tmp_path: Path, tmp_db: str, nsys_bin: str, nsys_args: list[str], said: str
) -> None:
    """`--nsys-arg=/bin/echo -- true` ran echo with the argument `true` under nsys, stored as a run of
    `true` that exited 0; `--nsys-arg=-o -- true` gave `true` to -o and profiled nothing."""
    prof = tmp_path / "p"
    args = ["profile", "--profile-dir", str(prof), *(f"--nsys-arg={a}" for a in nsys_args), "--", "true"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(said), result.stderr
    assert list(tmp_path.iterdir()) == []  # neither the database nor the report folder


def test_an_nsys_flag_and_its_value_in_two_nsys_args_are_taken() -> None:
    from harness.execution.nsys import check_extra_args

    check_extra_args(["-d", "5", "--trace=nvtx", "-h"])


def test_an_nsys_flag_without_a_value_is_refused_where_this_nsys_has_it(tmp_path: Path) -> None:
    """A last flag known to this nsys only (`--kill`): refused when the command is built, before it runs;
    one nsys does not know is left to nsys to refuse."""
    from harness.core.errors import UsageError
    from harness.execution.nsys import ProfileOptions, build_profile_command
    from harness.execution.nsys.find import NsysInfo

    info = NsysInfo(Path("/opt/nsys"), "2023.4.4.54", frozenset({"kill", "trace"}), "test")
    with pytest.raises(UsageError, match=r"'--kill' has no value"):
        build_profile_command(info, ProfileOptions(output=tmp_path / "r", extra_args=["--kill"]), ["true"])
    argv, _ = build_profile_command(
        info, ProfileOptions(output=tmp_path / "r", extra_args=["--nope"]), ["true"]
    )
    assert argv[-2:] == ["--nope", "true"]
