"""The golden outputs (tests/golden_outputs.py) are what the commands print today: every analysis command on
every fixture, and run, runs, show, diff and dashboard on a small CPU run. HARNESS_UPDATE_GOLDEN=1 rewrites
them (or `python tests/golden_outputs.py [NAME-PART ...]`)."""

from __future__ import annotations

from pathlib import Path

import golden_outputs as g
import pytest
from conftest import need

SLOW = pytest.mark.slow
CASES = list(g.analysis_cases())
# the quick ones stay in the default run: the small exports; the rest are slow
QUICK = ("nsys-cpu-train/", "kineto-alexnet/")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("name", "args"),
    [pytest.param(n, a, id=n, marks=[] if any(q in n for q in QUICK) else [SLOW]) for n, a in CASES],
)
def test_analysis_output_is_golden(name: str, args: list[str]) -> None:
    need(Path(args[1]))
    problem = g.check(name, g.invoke(args))
    assert problem is None, problem


@pytest.mark.slow
@pytest.mark.elsewhere
def test_run_show_runs_diff_dashboard_are_golden(tmp_path: Path) -> None:
    problems = [p for name, text in g.run_cases(tmp_path) if (p := g.check(name, text))]
    assert problems == [], "\n".join(problems)
