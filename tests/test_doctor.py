"""`harness doctor` with the real nsys: the self-test profiles, exports and reads back one range."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.cli import app

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
    ResultsStore(str(db)).save(make_result("tiny-1"))
    assert (check_db(str(db)).status, check_db(str(db)).detail) == ("ok", f"sqlite:///{db}: 1 run")
    ResultsStore(str(db)).save(make_result("tiny-2"))
    assert check_db(str(db)).detail == f"sqlite:///{db}: 2 runs"
    (tmp_path / "junk.sqlite").write_text("not a database\n" * 500)
    junk = check_db(str(tmp_path / "junk.sqlite"))
    assert junk.status == "fail" and "is not a SQLite database" in junk.detail


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
