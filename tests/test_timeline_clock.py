"""`health` and `timeline` on one clock: a time said by one is found at the same second by the other,
counted from the session's start as Nsight Systems' timeline counts."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from export_data import derive, query_rows
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()
STEP_RANGE = (
    "SELECT n.rowid, n.start, n.end FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
    "WHERE s.value = 'step' AND n.int64Value = {step}"
)


def _open_step(export: Path, folder: Path, step: int) -> Path:
    """A copy of `export` whose step `step` range was never closed (its end NULL, as nsys leaves it)."""
    ((rowid, _, _),) = query_rows(export, STEP_RANGE.format(step=step))
    return derive(
        export, folder / f"open{step}.sqlite", f"UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = {rowid}"
    )


def _said(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, args)
    return result.exit_code, " ".join(result.output.split())


def test_health_and_timeline_place_a_step_at_the_same_second(h100_export: Path, tmp_path: Path) -> None:
    """`health` said step 7 of the H100 capture starts at 19.028 s (from the session's start) while
    `timeline --step 7` said "window 13.325661744.. s into the capture" (from its first CUDA call, 5.702 s
    later): a second read in one was not the same spot in the other."""
    damaged = _open_step(h100_export, tmp_path, 6)  # health says where step 7 starts
    ((_, start7, end7),) = query_rows(h100_export, STEP_RANGE.format(step=7))
    assert (start7, end7) == (19_027_762_745, 19_143_599_973)

    code, health = _said(["health", str(damaged), "--format", "json", "--no-cache"])
    assert code == 0
    (at,) = re.findall(r"step 7's range starts after it, at ([0-9.,]+) s", health)
    assert at == "19.028"

    code, drawn = _said(["timeline", str(h100_export), "--step", "7", "-o", str(tmp_path / "s7.json")])
    assert code == 0, drawn
    assert "(window 19.027762745..19.143599973 s from the session's start)" in drawn
    assert f"{start7 / 1e9:.3f}" == at

    # the second health says, given to --start, draws step 7 from its start
    out = tmp_path / "at.json.gz"
    code, drawn = _said(["timeline", str(h100_export), "--start", at, "--end", "19.1", "-o", str(out)])
    assert code == 0, drawn
    with gzip.open(out, "rt") as f:
        steps = [
            e for e in json.load(f)["traceEvents"] if e.get("cat") == "harness_phase" and e["name"] == "step"
        ]
    assert [e["ts"] for e in steps] == [start7 / 1000]

    for command in ("health", "timeline"):
        code, helped = _said([command, "--help"])
        assert code == 0 and "from the session's start" in helped and "Nsight Systems' timeline" in helped
