"""A run's advice as stored with it and printed after its tables: the health (every check, the worst first
in one line) and the findings, largest time at stake first. `run --nsys` prints the health line and the
top three findings; `show RUN` repeats them from the results database; csv and json carry them whole.

The record is plain JSON (the results database keeps it in `runs.advice`):
`{"source": path, "health": {"worst": ..., "checks": [{name, status, evidence, fix}]},
"findings": [{rule, at_stake_ns, where, evidence, fix, data}], "instruments": {what the harness itself did:
analysis.advice.instruments, and its `line`} or null, "not judged": [what needs the run's record, what the
capture holds nothing for], "untrusted": why or null, "export": {size, mtime_ns, ctime_ns, digest} of the
file judged, or null}` (records stored before `data`, `instruments` and `export` existed lack them).
`export` tells `show RUN`, which repeats the record, whether the file at `source` is still the one judged
(`since_judged`) without reading it again: its size and times, and where they differ its sampled digest
(analysis.trace.digests.content_digest, about 200 KB read).
`untrusted` says why the capture cannot be trusted (its failed checks, analysis.advice.checks.why_untrusted):
its findings are kept but not ranked, since their time at stake comes from what is left of the capture.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.advice.checks import (
    FAIL,
    NOT_OF_THE_CAPTURE,
    OK,
    WARN,
    Check,
    Health,
    capture_failures,
    checks_table,
    failed_said,
    why_untrusted,
)
from analysis.advice.findings import (
    COLUMNS,
    DATA_COLUMN,
    NO_CUDA,
    NO_STEPS,
    WRAPPED,
    Advice,
    Finding,
    as_record,
)
from analysis.advice.where import ms
from analysis.trace.digests import content_digest

TOP = 3
RANK = {FAIL: 0, WARN: 1, OK: 2}
GONE, CHANGED = "gone", "changed"  # the file a record was judged of, as it is now (`since_judged`)


def advice_record(health: Health, found: list[Finding] | Advice) -> dict[str, Any]:
    """The record of a capture's health and findings (with an `Advice`, the harness's instruments and what
    could not be judged too)."""
    record = {
        "source": health.path,
        "health": {"worst": health.worst, "checks": [asdict(c) for c in health.checks]},
        "findings": as_record(found.findings if isinstance(found, Advice) else found),
        "untrusted": why_untrusted(health.checks) or None,
    }
    if isinstance(found, Advice):
        line = found.instruments_line()
        record["instruments"] = {**found.instruments.data(), "line": line} if line else None
        record["not judged"] = list(found.not_judged)
    return record


def export_stamp(path: Path) -> dict[str, int | str] | None:
    """What tells the file at `path` apart from another put at its path later, or from itself changed: its
    size, mtime and ctime, and its sampled content digest; None where it cannot be read."""
    try:
        st = path.stat()
        digest = content_digest(path, st.st_size)
    except OSError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "digest": digest}


def since_judged(record: dict[str, Any]) -> str | None:
    """Whether the file `record` was judged of is still that file: GONE (nothing at its path), CHANGED (its
    size or sampled content differ from its `export` stamp), None (the same, or not known: no stamp kept).
    Its content is read (`content_digest`) only where its size, mtime or ctime differ."""
    source = record.get("source")
    if not source:
        return None
    path = Path(str(source))
    if not path.is_file():
        return GONE
    kept = record.get("export")
    if not kept:
        return None
    try:
        st = path.stat()
    except OSError:  # gone since it was looked at
        return GONE
    if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (kept["size"], kept["mtime_ns"], kept["ctime_ns"]):
        return None
    if st.st_size != kept["size"]:
        return CHANGED
    try:  # the same size, other times: copied, touched, or written in place; its content tells
        return None if content_digest(path, st.st_size) == kept["digest"] else CHANGED
    except OSError:  # not readable: not known
        return None


def instruments_line(record: dict[str, Any]) -> str | None:
    """`harness instruments: …` of a record, said once apart from the findings; None when it has none."""
    return (record.get("instruments") or {}).get("line")


def checks_of(record: dict[str, Any]) -> list[Check]:
    return [Check(**c) for c in (record.get("health") or {}).get("checks", [])]


def health_line(record: dict[str, Any]) -> str:
    """`health ok (12 checks)`, or `health: 2 warnings, 1 failure of 12 checks; worst: NAME (fail): …`."""
    checks = checks_of(record)
    if not checks:
        return "health: not checked"
    # the worst first; among failures, those that make the capture untrustworthy
    bad = sorted(
        (c for c in checks if c.status != OK),
        key=lambda c: (RANK.get(c.status, 3), c.name in NOT_OF_THE_CAPTURE),
    )
    if not bad:
        return f"health ok ({len(checks)} checks)"
    counts = [
        f"{n} {word}{'s' * (n != 1)}"
        for status, word in ((FAIL, "failure"), (WARN, "warning"))
        if (n := sum(c.status == status for c in bad))
    ]
    worst = bad[0]
    worst_said = f"{worst.name} ({worst.status}): {worst.evidence}"
    return f"health: {', '.join(counts)} of {len(checks)} checks; worst: {worst_said}"


def health_counts(record: dict[str, Any]) -> str:
    """`health: 2 failures, 1 warning of 16 checks`: the health line without its worst check."""
    return health_line(record).split("; worst: ", 1)[0]


def finding_lines(record: dict[str, Any], top: int = TOP) -> list[str]:
    """One line per finding, the largest time at stake first: rule, time at stake, fix."""
    return [
        f"finding {i}: {f['rule']}: {ms(f['at_stake_ns'])} at stake ({f['where']}); fix: {f['fix']}"
        for i, f in enumerate(record.get("findings", [])[:top], 1)
    ]


def untrusted_line(record: dict[str, Any], what: str = "RUN") -> str | None:
    """Why the findings are not ranked, when the capture failed its health checks; None when it did not."""
    failed = capture_failures(checks_of(record))
    if not failed:
        return None
    n = len(record.get("findings", []))
    return (
        f"findings not ranked: the capture failed {failed_said(failed)}, so their time at stake would come "
        f"from what is left of it ({n} fired; `harness advise {what} --ignore-health` lists them, untrusted)"
    )


def degraded_reason(record: dict[str, Any]) -> str | None:
    """Why a run with this advice is stored as `degraded` (runs.error), or None when its capture is sound."""
    why = why_untrusted(checks_of(record))
    return f"its capture failed its health checks: {why}" if why else None


def summary_lines(record: dict[str, Any], top: int = TOP) -> list[str]:
    """The health line, then the top findings (or that none fired, or why they are not ranked)."""
    return [health_line(record), *findings_lines(record, top)]


def findings_lines(record: dict[str, Any], top: int = TOP, run: str = "RUN") -> list[str]:
    """The top findings, one line each (or that none fired, or why they are not ranked)."""
    untrusted = untrusted_line(record, run)
    if untrusted:
        return [untrusted]
    found = record.get("findings", [])
    lines = finding_lines(record, top)
    if not found:
        lines.append("findings: none fired" + _why_none(record.get("not judged") or []))
    elif len(found) > top:
        lines.append(f"{len(found) - top} more findings: `harness advise {run}` lists them all")
    said = instruments_line(record)
    return [*lines, said] if said else lines


def _why_none(not_judged: list[str]) -> str:
    """Why no rule fired where the capture lacked what rules judge (step ranges, CUDA): "none fired" alone
    would read as a clean capture. Empty where it lacked neither."""
    lacked = [
        (what, rules)
        for said, what, rules in (
            (NO_STEPS, "no step ranges", "the rules judged in steps"),
            (NO_CUDA, "no CUDA", "the rules that read CUDA"),
        )
        if any(said in line for line in not_judged)
    ]
    if not lacked:
        return ""
    whats, rules = zip(*lacked, strict=True)
    return f" (the capture has {' and '.join(whats)}: {' and '.join(rules)} had nothing to judge)"


def health_table(record: dict[str, Any]) -> pd.DataFrame:
    return checks_table(checks_of(record))


def findings_frame(record: dict[str, Any]) -> pd.DataFrame:
    """The findings of a record as a table, `Data` their evidence as data (empty for a record stored before
    findings carried it)."""
    rows = [
        (f["rule"], f["at_stake_ns"], f["where"], f["evidence"], f["fix"], f.get("data") or {})
        for f in record.get("findings", [])
    ]
    out = pd.DataFrame(rows, columns=[*COLUMNS, DATA_COLUMN]).astype({"Time at stake (ns)": "int64"})
    out.attrs["priority"] = ["Rule", "Time at stake (ns)", "Where", "Fix", "Evidence", DATA_COLUMN]
    out.attrs["wrap"] = WRAPPED  # sentences: wrapped on a terminal, never cut in the middle
    return out
