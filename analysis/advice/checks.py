"""What every health check is: a name, ok / warn / fail, the evidence and what to do; the checks of one trace
or run together (Health); and which failures make a run's capture untrustworthy.

A failed check of the capture (GPU work, NVTX ranges, names, times) or of how the run's NVTX ranges and timers
line up means the numbers drawn from the capture are not sound: the run is stored as `degraded` and its
findings are not ranked. A failed check of the conditions the run was timed in (the profiler's overhead,
a busy machine) says the timings are not comparable, not that the capture lost anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from workloads.names import counted

OK, WARN, FAIL = "ok", "warn", "fail"
COLUMNS = ["Check", "Status", "Evidence", "What to do"]
# failures that say how the run was timed or which ranks reported, not what its capture holds
NOT_OF_THE_CAPTURE = frozenset({"profiler overhead", "machine load", "ranks"})


@dataclass
class Check:
    """One check: its name, ok / warn / fail, the evidence, and what to do (empty when ok)."""

    name: str
    status: str
    evidence: str
    fix: str = ""


@dataclass
class Health:
    """Every check of one trace, and the detail tables behind them (title -> table)."""

    path: str
    checks: list[Check] = field(default_factory=list)
    details: dict[str, pd.DataFrame] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        return checks_table(self.checks)

    @property
    def worst(self) -> str:
        statuses = {c.status for c in self.checks}
        return FAIL if FAIL in statuses else WARN if WARN in statuses else OK

    def line(self) -> str:
        """One line: the worst status and the checks that are not ok."""
        bad = [f"{c.name} {c.status}" for c in self.checks if c.status != OK]
        return f"health {self.worst}: {len(self.checks)} checks" + (f"; {', '.join(bad)}" if bad else "")


def checks_table(checks: list[Check]) -> pd.DataFrame:
    """Check, Status, Evidence, What to do: sentences, wrapped on a terminal rather than cut."""
    out = pd.DataFrame([(c.name, c.status, c.evidence, c.fix) for c in checks], columns=COLUMNS)
    out.attrs["wrap"] = ["Evidence", "What to do"]
    # a check's evidence is why it has its status: kept on any terminal, wrapped as narrow as it must be
    out.attrs["deciding"] = ["Check", "Status", "Evidence"]
    out.attrs["priority"] = COLUMNS
    return out


def quote(text: str, limit: int = 120) -> str:
    """Outside text (a message, a kernel name) in evidence: on one line, at most `limit` characters."""
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def capture_failures(checks: list[Check]) -> list[Check]:
    """The failed checks that make what the capture says untrustworthy."""
    return [c for c in checks if c.status == FAIL and c.name not in NOT_OF_THE_CAPTURE]


def why_untrusted(checks: list[Check]) -> str:
    """The failed checks of the capture in one sentence: `NAME: evidence; NAME: evidence`."""
    return "; ".join(f"{c.name}: {c.evidence}" for c in capture_failures(checks))


def failed_said(failed: list[Check]) -> str:
    """Failed checks as what a capture failed: `1 health check (capture)`, `2 health checks (times, NVTX
    steps)`; a check's name alone would read `the capture failed capture`."""
    return f"{counted(len(failed), 'health check')} ({', '.join(c.name for c in failed)})"
