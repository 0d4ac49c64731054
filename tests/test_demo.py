"""`make demo` (scripts/demo.py) as a new user runs it: a run under nsys, a table read from a real GPU
export, the dashboard's page written and its path said, what to try next."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.nsys]


def test_the_demo_prints_a_table_from_an_export_and_the_dashboard_it_wrote(
    tmp_path: Path, nsys_bin: str
) -> None:
    env = {
        **os.environ,
        "HARNESS_DEMO_DIR": str(tmp_path / "demo"),
        "HARNESS_DB": f"sqlite:///{tmp_path / 'results.sqlite'}",
        "HARNESS_NSYS": nsys_bin,
        "COLUMNS": "80",
        "HARNESS_STATS_FORMAT": "2023.4",  # the tables as the nsys `make setup` installs prints them
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "$ harness run tiny --device cpu --steps 3" in out and "--nsys --profile-dir" in out
    assert "NVTX vs in-process timers" in out  # the run's capture read and checked against its timers
    kernels = out.split("$ harness kernels ", 1)[1]
    assert kernels.splitlines()[1] == "CUDA kernels in h100-tiny.sqlite"
    # the H100 capture's heaviest kernel, and its GPU time per phase (box or ASCII lines, as the locale has)
    assert re.search(r"10\.6 \W 2\.750 \W +91 \W", kernels), kernels
    assert re.search(r"backward +\W +5 \W 1,510 \W 52\.7 \W 9\.709 \W", out), out
    page = tmp_path / "demo" / "dashboard.html"
    assert f"wrote {page} (" in out and page.read_text().startswith("<!DOCTYPE html>")
    assert "harness advise " in out.split("Next (after", 1)[1]
