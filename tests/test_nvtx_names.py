"""PyTorch's NVTX names grouped by operator (analysis.nvtx_names) in nvtx, nvtx-gpu and summary, on the
torchrun_2gpu capture (19,118 push/pop ranges, 18,499 distinct names), against sums written in SQL."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import SHARED_NSYS, need
from typer.testing import CliRunner

from analysis.nvtx_names import GROUPING_LINE, group_name, grouped_categories
from analysis.tables.nvtx import nvtx_summary
from analysis.tables.nvtx_gpu import nvtx_gpu_summary
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
# push/pop ranges (eventType 59) with their text, inline or through StringIds
RANGES_SQL = """
SELECT COUNT(*), SUM(e.end - e.start) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
WHERE e.eventType = 59 AND e.end IS NOT NULL AND COALESCE(e.text, s.value) LIKE ?
"""
DISTINCT_SQL = """
SELECT COUNT(DISTINCT COALESCE(e.text, s.value)) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
WHERE e.eventType = 59 AND e.end IS NOT NULL
"""


@pytest.fixture(scope="module")
def capture() -> Path:
    path = SHARED_NSYS / "ext" / "torchrun_2gpu" / "report.sqlite"
    need(path)
    return path


def _sql(path: Path, query: str, *args: str) -> tuple:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query, args).fetchone()


def test_group_name_drops_the_per_call_fields() -> None:
    name = "aten::to, seq = 1, op_id = 2, sizes = [[8, 64], []], input_op_ids = [3]"
    assert group_name(name) == "aten::to"
    assert group_name(name, "shape") == "aten::to, sizes = [[8, 64], []]"
    assert group_name(name, "raw") == name
    assert group_name("aten::empty, op_id = 9, sizes = []", "shape") == "aten::empty, sizes = []"
    assert group_name("forward") == "forward"  # no fields: its own group
    cat, fields = grouped_categories(pd.Series(["step", "aten::mm, op_id = 1", "aten::mm, op_id = 2", None]))
    assert fields and list(cat.astype(object)[:3]) == ["step", "aten::mm", "aten::mm"] and pd.isna(cat[3])
    cat, fields = grouped_categories(pd.Series(["step", "forward"]))
    assert not fields and list(cat) == ["step", "forward"]


def test_nvtx_summary_groups_by_operator(capture: Path) -> None:
    trace = open_trace(capture)
    by_op = nvtx_summary(trace).set_index("Range")
    count, total = _sql(capture, RANGES_SQL, "aten::to, %")
    assert (count, total) == (1995, 362_975_807)
    assert by_op.loc["aten::to", "Instances"] == count and by_op.loc["aten::to", "Total Time (ns)"] == total
    assert len(by_op) == 93 and by_op["Instances"].sum() == 19_118
    assert by_op.attrs["notes"][0] == GROUPING_LINE["op"]
    raw = nvtx_summary(trace, by="raw")
    assert len(raw) == _sql(capture, DISTINCT_SQL)[0] == 18_499
    assert raw.attrs["notes"][0] == GROUPING_LINE["raw"]
    assert raw["Total Time (ns)"].sum() == by_op["Total Time (ns)"].sum()


def test_no_grouping_line_without_pytorch_names(cpu_export: Path) -> None:
    table = nvtx_summary(open_trace(cpu_export))
    assert not any(n.startswith("NVTX ranges") for n in table.attrs["notes"])
    assert len(table) == len(nvtx_summary(open_trace(cpu_export), by="raw"))


def test_nvtx_gpu_groups_by_operator(capture: Path) -> None:
    trace = open_trace(capture)
    by_op = nvtx_gpu_summary(trace, mode="thread")
    raw = nvtx_gpu_summary(trace, mode="thread", by="raw")
    # one row per operator and thread; the flash-attention forward ranges: 33 per process, one kernel each
    flash = by_op[by_op["Range"] == "flash_attn::_flash_attn_forward"]
    assert flash["NVTX Inst"].tolist() == [33, 33] and flash["Kern Inst"].tolist() == [33, 33]
    assert len(by_op) < 100 < len(raw)
    assert by_op.attrs["notes"][0] == GROUPING_LINE["op"]


def test_cli_default_op_and_raw_names(capture: Path) -> None:
    grouped = runner.invoke(app, ["nvtx", str(capture), "--format", "csv"])
    assert grouped.exit_code == 0, grouped.output
    table = pd.read_csv(io.StringIO(grouped.stdout)).set_index("Range")
    assert len(table) == 93 and table.loc["aten::to", "Instances"] == 1995
    assert GROUPING_LINE["op"] in grouped.stderr
    raw = runner.invoke(app, ["nvtx", str(capture), "--raw-names", "--format", "csv"])
    expected = pd.read_csv(capture.parent / "expected" / "nvtxsum.csv")
    assert len(pd.read_csv(io.StringIO(raw.stdout))) == len(expected) == 18_499
    summary = runner.invoke(app, ["summary", str(capture), "--format", "json"])
    doc = json.loads(summary.stdout)
    assert len(doc["NVTX ranges (nvtxsum)"]) == 93


def test_groupings_asked_together_are_refused(cpu_export: Path) -> None:
    """`--by shape --raw-names` printed the raw names, and `nvtx --trace --by shape` each range as recorded,
    each passing the other option over without a word; both are usage errors now, in every command that
    takes them."""
    for args in (
        ["nvtx", "--by", "shape", "--raw-names"],
        ["nvtx-gpu", "--by", "shape", "--raw-names"],
        ["summary", "--by", "shape", "--raw-names"],
        ["nvtx", "--trace", "--by", "shape"],
    ):
        result = runner.invoke(app, [args[0], str(cpu_export), *args[1:]])
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: --")
    both = runner.invoke(app, ["diff", str(cpu_export), str(cpu_export), "--by", "shape", "--raw-names"])
    assert both.exit_code == 2 and "exclude each other" in both.stderr
    raw = runner.invoke(app, ["nvtx", str(cpu_export), "--trace", "--raw-names", "--format", "json"])
    assert raw.exit_code == 0 and len(json.loads(raw.stdout)) == 32
