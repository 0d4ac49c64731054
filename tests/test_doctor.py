"""`harness doctor` with the real nsys: the self-test profiles, exports and reads back one range."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.profilers.capture import save as save_run

runner = CliRunner()


@pytest.mark.nsys
@pytest.mark.slow
def test_doctor_self_test_passes(nsys_bin: str, tmp_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)
    result = runner.invoke(app, ["doctor", "--format", "json"])
    assert result.exit_code == 0, result.output
    checks = {row["Check"]: row for row in json.loads(result.stdout)}
    assert checks["self-test"]["Status"] == "ok"
    assert "read back range 'harness-doctor' (payload 7," in checks["self-test"]["Detail"]
    assert checks["nsys"]["Detail"].startswith(nsys_bin)
    assert checks["python nvtx"]["Detail"].startswith("0.2.11")
    assert checks["results database"]["Detail"].startswith(f"no results database at {tmp_db[10:]}")
    assert checks["torch"]["Detail"].startswith("2.")


def test_doctor_without_nsys_fails_with_the_reason(tmp_db: str, tmp_path) -> None:
    result = runner.invoke(app, ["doctor", "--nsys-path", str(tmp_path / "nsys"), "--format", "json"])
    assert result.exit_code == 1
    checks = {row["Check"]: row for row in json.loads(result.stdout)}
    assert checks["nsys"]["Status"] == "fail"
    assert "is not an executable file" in checks["nsys"]["Detail"]
    assert checks["self-test"] == {"Check": "self-test", "Status": "fail", "Detail": "skipped: no nsys"}
    assert "Traceback" not in result.output


@pytest.mark.parametrize("self_test", ["--self-test", "--no-self-test"])
def test_doctor_given_a_program_that_is_not_nsys_exits_1(tmp_db: str, self_test: str) -> None:
    """The nsys row is about the nsys the harness would use: its failure sets the exit code as the other
    failing rows do, with or without the self-test (which would have failed on it too)."""
    result = runner.invoke(app, ["doctor", self_test, "--nsys-path", "/bin/true", "--format", "json"])
    assert result.exit_code == 1, result.output
    checks = {row["Check"]: row for row in json.loads(result.stdout)}
    assert checks["nsys"]["Status"] == "fail"
    assert checks["nsys"]["Detail"].startswith("/bin/true is not nsys: its --version printed no Nsight")
    assert checks["results database"]["Status"] == "info" and "Traceback" not in result.output


def test_a_failing_nsys_row_sets_the_exit_code_and_a_warning_does_not() -> None:
    from harness.experiments.doctor import Check, failed

    fine = [Check("nsys", "ok", "x"), Check("results database", "ok", "y")]
    assert not failed(fine)
    assert failed([*fine, Check("nsys", "fail", "incomplete: records nothing")])
    assert failed([Check("nsys", "fail", "not found"), Check("self-test", "info", "not run")])
    assert failed([*fine, Check("GPU self-test: CUDA graph", "fail", "no graph launch")])
    assert not failed([*fine, Check("python nvtx", "warn", "records nothing"), Check("NVML", "warn", "x")])


def test_doctor_tests_the_database_it_is_given(tmp_path) -> None:
    result = runner.invoke(app, ["doctor", "--no-self-test", "--db", "foo://x", "--format", "json"])
    assert result.exit_code == 1
    checks = {row["Check"]: row for row in json.loads(result.stdout)}
    assert checks["results database"]["Status"] == "fail"
    assert checks["results database"]["Detail"].startswith("unknown database URL scheme 'foo://'")


def test_database_check(tmp_path) -> None:
    from test_store import make_result

    from harness.experiments.doctor import check_db
    from harness.store.results import ResultsStore

    db = tmp_path / "r.sqlite"
    missing = check_db(str(db))
    assert (missing.status, missing.detail.split(" (")[0]) == ("info", f"no results database at {db}")
    assert not db.exists()  # doctor creates nothing
    save_run(ResultsStore(str(db)), make_result("tiny-1"))
    assert (check_db(str(db)).status, check_db(str(db)).detail) == ("ok", f"sqlite:///{db}: 1 run")
    save_run(ResultsStore(str(db)), make_result("tiny-2"))
    assert check_db(str(db)).detail == f"sqlite:///{db}: 2 runs"
    (tmp_path / "junk.sqlite").write_text("not a database\n" * 500)
    junk = check_db(str(tmp_path / "junk.sqlite"))
    assert junk.status == "fail" and "is not a SQLite database" in junk.detail


def test_a_database_whose_folder_is_missing_is_said_so(tmp_path) -> None:
    """`doctor --db /nonexist/dir/x.db` said "`harness run` creates one", as of a file whose folder is there;
    under a file, where run cannot create it, the same words."""
    from harness.experiments.doctor import check_db

    db = tmp_path / "not" / "yet" / "r.sqlite"
    missing = check_db(str(db))
    assert (missing.status, missing.detail) == (
        "info",
        f"no results database at {db}, nor its folder {db.parent} (`harness run` creates the folder and the "
        "database; --db or HARNESS_DB names another)",
    )
    assert not (tmp_path / "not").exists()  # doctor creates nothing
    (tmp_path / "file").write_text("")
    under_a_file = check_db(str(tmp_path / "file" / "r.sqlite"))
    assert (under_a_file.status, under_a_file.detail) == (
        "fail",
        f"no results database at {tmp_path / 'file' / 'r.sqlite'}: {tmp_path / 'file'} is a file, not a "
        "folder: `harness run` cannot create it; --db or HARNESS_DB names another",
    )
    listed = runner.invoke(app, ["runs", "--db", str(db)])
    assert listed.exit_code == 1 and " ".join(listed.output.split()) == f"error: {missing.detail}"


@pytest.mark.parametrize(
    ("nsys", "status"), [("2022.4.2.1", "warn"), ("2023.4.4.54", "warn"), ("2025.3.2", "ok")]
)
def test_a_newer_python_nvtx_is_warned_about_where_it_records_nothing(
    monkeypatch: pytest.MonkeyPatch, nsys: str, status: str
) -> None:
    """nvtx 0.2.17 recorded 0 of 3 ranges under nsys 2022.4 and 2023.4 (docs/nsys.md); newer nsys untried."""
    from pathlib import Path

    from harness.execution.nsys import NsysInfo
    from harness.experiments import doctor

    monkeypatch.setattr(doctor.metadata, "version", lambda name: "0.2.17")
    check = doctor.check_nvtx(NsysInfo(path=Path("/x"), version=nsys, flags=frozenset(), source="t"))
    assert check.status == status
    if status == "warn":
        assert check.detail == f"0.2.17: records nothing under nsys {nsys}; use 0.2.11"


def _half_copied_nsys(folder: Path, cpu_export: Path) -> Path:
    """A stand-in nsys laid out as Debian's (bin/nsys a link to target-linux-x64/nsys) whose target folder
    lacks libToolsInjection64.so: as the real one then does, it runs the program and exports a report
    holding nothing of it (here: the CPU export without its NVTX and OS runtime tables)."""
    folder.mkdir(parents=True)
    empty = folder / "empty.sqlite"
    shutil.copy(cpu_export, empty)
    empty.chmod(0o644)
    with sqlite3.connect(empty) as db:
        for table in ("NVTX_EVENTS", "OSRT_API", "OSRT_CALLCHAINS"):
            db.execute(f"DROP TABLE {table}")
    target = folder / "usr/lib/nsight-systems/target-linux-x64"
    target.mkdir(parents=True)
    (target / "libcupti.so.12.4").write_text("")
    nsys = target / "nsys"
    nsys.write_text(
        f"""#!{sys.executable}
import shutil, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    sys.exit(print("NVIDIA Nsight Systems version 2023.4.4.54-1"))
if args[:2] == ["profile", "--help"]:
    sys.exit(print("\\t--output=\\n\\t--force-overwrite=\\n\\t--export=\\n\\t--trace="))
out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
program = [a for a in args[1:] if not a.startswith("-")]
subprocess.run(program)
open(out + ".nsys-rep", "w").close()
shutil.copy({str(empty)!r}, out + ".sqlite")
print(f"Generated:\\n    {{out}}.nsys-rep\\n    {{out}}.sqlite")
"""
    )
    nsys.chmod(0o755)
    (folder / "usr/lib/nsight-systems/bin").mkdir()
    (folder / "usr/lib/nsight-systems/bin/nsys").symlink_to("../target-linux-x64/nsys")
    return folder / "usr/lib/nsight-systems/bin/nsys"


def test_doctor_with_a_half_copied_nsys_fails_its_row_and_says_why(
    tmp_db: str, tmp_path: Path, cpu_export: Path
) -> None:
    """An nsys without its injection library records nothing: the doctor's table says so on the nsys row
    and the self-test's (it printed only "no NVTX data … profile with --trace=nvtx", blaming the flags)."""
    nsys = _half_copied_nsys(tmp_path / "nsys", cpu_export)
    result = runner.invoke(app, ["doctor", "--nsys-path", str(nsys), "--format", "json"])
    assert result.exit_code == 1, result.output
    checks = {row["Check"]: row for row in json.loads(result.stdout)}
    target = tmp_path / "nsys/usr/lib/nsight-systems/target-linux-x64"
    assert checks["nsys"]["Status"] == "fail"
    assert checks["nsys"]["Detail"] == (
        f"{nsys} (found via --nsys-path) is incomplete: no libToolsInjection64.so in {target}, so it runs a "
        "program and records nothing of it; install it again whole (the project-local copy: `make setup`)"
    )
    assert checks["self-test"]["Status"] == "fail"
    assert checks["self-test"]["Detail"] == (
        "nsys ran the script and recorded nothing of it: its export holds no NVTX range and no OS runtime "
        "call, both traced (--trace=nvtx,osrt); an nsys installation that is incomplete does this (the nsys "
        "row)"
    )
    assert checks["nsys version"]["Detail"] == "2023.4.4.54"
    assert "--trace=nvtx and a program" not in result.output


def test_an_nsys_whose_target_folder_cannot_be_found_is_not_called_incomplete(tmp_path: Path) -> None:
    """A wrapper script (as CUDA's bin/nsys can be) names the real nsys only inside it: nothing to tell."""
    from harness.execution.nsys.find import missing_injection

    wrapper = tmp_path / "cuda/bin/nsys"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text('#!/bin/sh\nexec /elsewhere/nsys "$@"\n')
    assert missing_injection(wrapper) is None
    whole = tmp_path / "opt/2024.1/target-linux-x64"
    whole.mkdir(parents=True)
    (whole / "libToolsInjection64.so").write_text("")
    (tmp_path / "opt/2024.1/bin").mkdir()
    assert missing_injection(tmp_path / "opt/2024.1/bin/nsys") is None
    (whole / "libToolsInjection64.so").unlink()
    assert missing_injection(tmp_path / "opt/2024.1/bin/nsys") == whole


def test_an_nsys_that_lists_none_of_the_flags_says_it_lacks_them_all(tmp_path: Path) -> None:
    from harness.experiments.doctor import FLAGS_OF_INTEREST, check_nsys

    bare = tmp_path / "nsys"
    help_text = "  -t, --trace=<value>\n  -o, --output=<value>\n"
    bare.write_text(f'#!/bin/sh\necho "NVIDIA Nsight Systems version 2024.1.1"\nprintf "{help_text}"\n')
    bare.chmod(0o755)
    checks, info = check_nsys(str(bare))
    flags = {c.item: (c.status, c.detail) for c in checks}["nsys profile flags"]
    assert info is not None and flags == (
        "info",
        "lacks every flag checked: "
        + ", ".join(f"--{f}" for f in FLAGS_OF_INTEREST)
        + " (left out of the commands)",
    )


def test_an_nsys_whose_profile_help_lists_no_option_is_warned_of(tmp_path: Path) -> None:
    """A script that prints a version and nothing else passed `doctor --no-self-test` with every row ok or
    info: every nsys lists --trace and --output."""
    from harness.experiments.doctor import check_nsys

    fake = tmp_path / "nsys"
    fake.write_text('#!/bin/sh\necho "NVIDIA Nsight Systems version 2024.1.1"\n')
    fake.chmod(0o755)
    checks, _ = check_nsys(str(fake))
    status, detail = {c.item: (c.status, c.detail) for c in checks}["nsys profile flags"]
    assert status == "warn" and detail.startswith("`nsys profile --help` does not list --trace and --output")
