"""`health` and `timeline` on one clock: a time said by one is found at the same second by the other,
counted from the session's start as Nsight Systems' timeline counts; and a step whose range was never
closed is not drawn over the steps after it."""

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


def test_a_step_never_closed_is_drawn_up_to_the_next_step_or_refused(
    h100_export: Path, tmp_path: Path
) -> None:
    """`timeline --step 6` of a capture whose step 6 range was never closed drew 13.2..14.9 s, steps 6 to
    14 (24,300 kernels): it is drawn up to step 7's start (its own 2,700 kernels) and says so; the last
    step, which no step follows, is refused in one line (exit 2), not drawn to the capture's end."""
    ((_, start6, _),) = query_rows(h100_export, STEP_RANGE.format(step=6))
    ((_, start7, _),) = query_rows(h100_export, STEP_RANGE.format(step=7))
    damaged = _open_step(h100_export, tmp_path, 6)
    out = tmp_path / "s6.json"
    code, drawn = _said(["timeline", str(damaged), "--step", "6", "-o", str(out)])
    assert code == 0, drawn
    assert "(window 18.899701848..19.027762745 s from the session's start)" in drawn
    assert (start6, start7) == (18_899_701_848, 19_027_762_745)
    assert "2,700 kernel," in drawn
    assert (
        "step 6's range was never closed (its end was lost): drawn up to where the next step starts, "
        "19.028 s from the session's start" in drawn
    )
    events = json.loads(out.read_text())["traceEvents"]
    assert max(e["ts"] for e in events if e.get("cat") == "kernel") < start7 / 1000 + 10_000  # ms of GPU lag

    code, drawn = _said(["timeline", str(damaged), "--step", "6", "--phase", "backward", "-o", str(out)])
    assert code == 0 and "(window 18.945195932..19.011315953 s from the session's start)" in drawn, drawn

    last = _open_step(h100_export, tmp_path, 14)
    result = runner.invoke(app, ["timeline", str(last), "--step", "14", "-o", str(tmp_path / "s14.json")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert " ".join(result.output.split()) == (
        "error: step 14's range was never closed (its end was lost) and no step starts after it: where it "
        "ends is not known; --start 19.857835221 draws from its start (the session's start is 0 s)"
    )
    assert not (tmp_path / "s14.json").exists()
    code, drawn = _said(["timeline", str(last), "--step", "13", "-o", str(out)])  # closed: as recorded
    assert code == 0 and "never closed" not in drawn and "(window 19.720096531..19.857623824 s" in drawn
