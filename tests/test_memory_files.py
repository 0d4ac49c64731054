"""Memory files given where a trace of events is read: a torch.profiler memory timeline
(export_memory_timeline as JSON, gzipped JSON or an HTML page) and a CUDA memory snapshot
(torch.cuda.memory._dump_snapshot, a pickle). Each command that reads events ends in one line naming what
the file is and what to give instead (it said `no CPU operators …: record it with ProfilerActivity.CPU`,
wrote an empty Chrome trace, or called the pickle `not an SQLite file`); capture health still fails the
timeline's check, as before."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest
from conftest import need
from kineto_data import SHARED_KINETO
from test_run_memory import snapshot
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()
GIVE = (
    "give the trace torch.profiler wrote (export_chrome_trace or tensorboard_trace_handler: .json, .json.gz) "
    "or an Nsight Systems export (.sqlite)"
)
# torch/profiler/_memory_profiler.py export_memory_timeline_html's page, its image cut short
PAGE = """<html>
<head><meta charset="utf-8" /><title>GPU Memory Timeline HTML</title></head>
<body>
  <img src='data:image/png;base64,iVBORw0KGgo='>
</body>
</html>"""


def _one_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr.strip()


def _timelines(tmp_path: Path) -> dict[str, tuple[Path, int]]:
    """The shared raw timeline (a list of [time, action, …] rows) and export_memory_timeline's .json form
    ([times, sizes], written as torch writes it), each with how many values its list holds."""
    raw = need(SHARED_KINETO / "memory-timeline" / "memory_timeline.raw.gz")
    rows = len(json.loads(gzip.decompress(raw.read_bytes())))
    plain = tmp_path / "memory.json"
    plain.write_text(json.dumps([[1_000, 2_000, 3_000], [[0, 512, 0], [0, 1024, 0], [0, 256, 0]]]))
    return {"raw": (raw, rows), "json": (plain, 2)}


@pytest.mark.parametrize("form", ["raw", "json"])
def test_a_memory_timeline_is_named_by_every_command_that_reads_events(tmp_path: Path, form: str) -> None:
    path, values = _timelines(tmp_path)[form]
    said = (
        f"its list holds {values:,} values and no event, as a memory timeline (torch.profiler's "
        f"export_memory_timeline) does: it is not a trace; {GIVE}"
    )
    assert _one_line(["operators", str(path)]) == f"error: no CPU operators in {path}: {said}"
    assert _one_line(["kernels", str(path)]) == f"error: no CUDA kernel data in {path}: {said}"
    out = tmp_path / "timeline.json"
    assert _one_line(["timeline", str(path), "-o", str(out)]) == f"error: no events in {path}: {said}"
    assert not out.exists()  # no empty page written in its place
    health = runner.invoke(app, ["health", str(path), "--format", "csv"])  # still a failed check, as before
    assert health.exit_code == 0 and "invalid events,fail," in health.stdout


@pytest.mark.parametrize("form", ["raw", "json"])
def test_a_memory_timeline_is_named_once_by_the_commands_that_read_every_table(
    tmp_path: Path, form: str
) -> None:
    """advise printed its failed health check and then `no findings ranked`; summary, the dashboard (each
    panel) and diff (a table of dashes, exit 0) said it once per table they lacked; ranks said "no phase
    ranges and no kernels"."""
    path, values = _timelines(tmp_path)[form]
    said = (
        f"error: no events in {path}: its list holds {values:,} values and no event, as a memory timeline "
        f"(torch.profiler's export_memory_timeline) does: it is not a trace; {GIVE}"
    )
    trace = need(SHARED_KINETO / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz")
    page = tmp_path / "page.html"
    for args in (
        ["advise", str(path)],
        ["advise", str(path), "--rule", "gpu-starv"],
        ["summary", str(path)],
        ["dashboard", str(path), "-o", str(page)],
        ["diff", str(trace), str(path)],
        ["ranks", str(path)],
    ):
        assert _one_line(args) == said, args
    assert not page.exists()
    from analysis import front
    from analysis.errors import ExportError

    with pytest.raises(ExportError) as raised:  # in Python as advise says it, not as a failed health check
        front.open(path, cache=False).findings()
    assert f"error: {raised.value}" == said


def test_a_memory_timeline_among_several_exports_is_refused_by_summary(tmp_path: Path) -> None:
    """`summary TRACE TIMELINE` printed the trace's tables and five notes "no data in memory_timeline.raw.gz",
    exit 0, never saying the file is no trace; it is refused as `kernels TRACE TIMELINE` refuses it."""
    path, values = _timelines(tmp_path)["raw"]
    trace = need(SHARED_KINETO / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz")
    said = _one_line(["summary", str(trace), str(path), "--format", "csv"])
    assert said == (
        f"error: 1 of 2 exports could not be read, so no table was made: no events in {path}: its list "
        f"holds {values:,} values and no event, as a memory timeline (torch.profiler's "
        f"export_memory_timeline) does: it is not a trace; {GIVE}. Read: {trace}. Fix or leave out the ones "
        "refused"
    )


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        (
            "run.memory.pickle",
            pickle.dumps(snapshot()),
            "a CUDA memory snapshot (torch.cuda.memory._dump_snapshot: https://pytorch.org/memory_viz)",
        ),
        ("other.pkl", pickle.dumps({"a": 1}, protocol=2), "a Python pickle"),
        ("memory.html", PAGE.encode(), "a memory timeline page (torch.profiler's export_memory_timeline)"),
        ("page.html", b"<!DOCTYPE html><html><body>a page</body></html>", "an HTML page"),
    ],
)
def test_a_snapshot_pickle_or_a_page_is_named(tmp_path: Path, name: str, content: bytes, what: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    for command in (["operators"], ["timeline", "-o", str(tmp_path / "out.json")], ["health"]):
        said = _one_line([command[0], str(path), *command[1:]])
        assert said == f"error: {path} is {what}, not a trace: {GIVE}"
    assert not (tmp_path / "out.json").exists()
