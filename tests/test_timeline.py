"""One step's NVTX ranges, kernels and memory copies for the dashboard's timeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_data import with_harness_ranges

from analysis.errors import ExportError
from analysis.trace.opening import open_trace
from analysis.views.timeline import EVENT_COLUMNS, step_events


def test_cpu_steps(cpu_export: Path) -> None:
    export = open_trace(cpu_export)
    median = step_events(export)
    assert list(median.columns) == EVENT_COLUMNS
    # no payloads, no `measured` range: steps numbered 0..7, the median-length one is shown
    assert median["step"].iloc[0] == 5
    assert median["name"].tolist() == ["step", "forward", "backward", "optimizer"]
    assert median["lane"].unique().tolist() == ["python (main thread)"]
    first = step_events(export, step=0)
    assert first["start_ns"].iloc[0] == 7178593525 and first["end_ns"].iloc[0] == 7345869498
    with pytest.raises(ExportError, match=r"no step 8 .*\(steps 0\.\.7\)"):
        step_events(export, step=8)


def test_gpu_step(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(with_harness_ranges(a100_export, tmp_path / "h.sqlite"))
    events = step_events(export, step=3)
    kinds = events.groupby("kind").size().to_dict()
    # step, forward, backward; `measured` spans every step and is left out, so the step is level 0
    assert kinds == {"kernel": 1, "memcpy": 1, "nvtx": 3}
    nvtx = events[events["kind"] == "nvtx"]
    assert nvtx["name"].tolist() == ["step", "forward", "backward"] and nvtx["level"].tolist() == [0, 1, 1]
    kernel = events[events["kind"] == "kernel"].iloc[0]
    assert kernel["lane"] == "stream 7" and kernel["end_ns"] - kernel["start_ns"] == 17720488
    assert events[events["kind"] == "memcpy"]["name"].tolist() == ["[CUDA memcpy DtoH]"]
    assert (events["step"] == 3).all()
    assert step_events(export, max_kernels=0).attrs["notes"] == ["step 2: showing the first 0 of 1 kernels"]


def test_no_steps(a100_export: Path) -> None:
    with pytest.raises(ExportError, match="no 'step' NVTX ranges"):
        step_events(open_trace(a100_export))


def test_a_phase_not_in_a_step_names_the_ranges_it_holds(cpu_export: Path) -> None:
    """`timeline --step N --phase P` with no range P in step N said only that: the names it could take
    were nowhere (a Kineto trace's `## backward ##`, a capital letter), now the step's ranges follow, those
    holding P first."""
    from analysis.views.timeline import window_of

    trace = open_trace(cpu_export)
    with pytest.raises(ExportError) as refused:
        window_of(trace, step=1, phase="Forward")
    assert str(refused.value) == (
        f"no 'Forward' range in step 1 of {cpu_export}: its ranges are 'forward', 'backward', 'optimizer'"
    )
