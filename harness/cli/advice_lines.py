"""The advice stored with a run (its health and findings), said as `run` and `show` say it: one line for the
health, the top findings a line each, the whole as tables for csv and json."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.cli.common import note, warn
from harness.experiments import advice

if TYPE_CHECKING:
    import pandas as pd


def advice_tables(record: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    """The run's health and findings whole, for csv and json."""
    return advice.advice_tables(record)


def say_health(record: dict[str, Any], degraded: str | None = None) -> None:
    """The health in one line, a warning when not ok; for the run `degraded` names (stored as degraded),
    why first."""
    for level, line in advice.health_lines(record, degraded):
        (warn if level == advice.WARN else note)(line)


def say_findings(record: dict[str, Any], run: str = "RUN") -> None:
    """The top findings, one line each, or why they are not ranked (a warning)."""
    for level, line in advice.findings_lines(record, run):
        (warn if level == advice.WARN else note)(line)


def since_capture(record: dict[str, Any], run: str) -> str | None:
    """The line that says the run's export is gone or changed since its advice was judged (None: neither)."""
    return advice.since_capture_line(record, run)
