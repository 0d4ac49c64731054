"""The findings panel: the newest run's stored findings as bars of their time at stake."""

from __future__ import annotations

import pandas as pd
from test_store import make_result

from analysis.advice.findings import Finding
from analysis.advice.health import Health
from analysis.advice.record import advice_record, health_line
from analysis.advice.run_checks import RunFacts, run_checks
from analysis.dashboard.findings import findings_panel
from analysis.dashboard.panel import DashboardData
from analysis.dashboard.registry import PANELS
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore


def _record(found: list[Finding]) -> dict:
    health = Health("r.sqlite")
    health.checks = run_checks(RunFacts(world_size=2, ranks_seen=[0]))
    return advice_record(health, found)


def test_panel_draws_the_newest_runs_findings_largest_first(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-old"))
    save_run(store, make_result("tiny-new"))
    store.save_advice("tiny-old", _record([Finding("launch-bound", 9_000_000, "forward", "e", "graphs")]))
    found = [
        Finding("gpu-host-wait", 540_091_000, "forward 47%", "idle <k[/x]>", "overlap"),
        Finding("sync-in-step", 79_000, "forward 100%", "24 calls", "drop .item()"),
    ]
    store.save_advice("tiny-new", _record(found))
    spec = next(s for s in PANELS if s.key == "findings")  # as the page builds it: its text escaped
    panel = spec(DashboardData(runs=store.runs()))
    assert panel.figure is not None and panel.title == "Findings of run tiny-new, largest time at stake first"
    (bar,) = panel.figure.data
    assert list(bar.y) == ["sync-in-step", "gpu-host-wait"]  # the largest drawn at the top
    assert list(bar.x) == [0.079, 540.091]
    assert bar.customdata[1][1] == "idle &lt;k[/x]&gt;"  # outside text is never the hover's markup
    assert panel.notes == [health_line(_record(found))]
    assert "findings" in [spec.key for spec in PANELS]


def test_panel_says_what_is_missing() -> None:
    runs = pd.DataFrame({"run_id": ["a"], "created_at": ["2026-11-25"], "advice": [None]})
    assert findings_panel(DashboardData(runs=runs)).missing == (
        "no run with stored findings: `harness run tiny --nsys` stores them"
    )
    runs["advice"] = [_record([])]
    missing = findings_panel(DashboardData(runs=runs)).missing
    assert missing == f"run a: no finding fired; {health_line(_record([]))}"
