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
    assert checks["results database"]["Detail"] == tmp_db
    assert checks["torch"]["Detail"].startswith("2.")


def test_doctor_without_nsys_fails_with_the_reason(tmp_db: str, tmp_path) -> None:
    result = runner.invoke(app, ["doctor", "--nsys-path", str(tmp_path / "nsys"), "--format", "json"])
    assert result.exit_code == 1
    checks = {row["Check"]: row for row in json.loads(result.stdout)}
    assert checks["nsys"]["Status"] == "fail"
    assert "is not an executable file" in checks["nsys"]["Detail"]
    assert checks["self-test"] == {"Check": "self-test", "Status": "fail", "Detail": "skipped: no nsys"}
    assert "Traceback" not in result.output
