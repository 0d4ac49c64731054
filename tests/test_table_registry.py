"""A table is one module: put on the registry's path (analysis.tables), it is a command of `harness`, in
`harness --help`, with its own options, and a part of `harness summary`, with nothing written anywhere
else. The module below is the example of docs/dev/architecture.md ("Adding a table")."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SHARED_NSYS, need
from typer.testing import CliRunner

import analysis.tables
from harness.cli import COMMANDS, app

runner = CliRunner()

STREAMS = '''"""Kernel time per device and stream: `harness streams`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.tables.table import TOP, InSummary, Option, frame_table

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.trace import Trace


def stream_table(trace: Trace, device: int | None = None) -> pd.DataFrame:
    """Kernels and their GPU time per device and stream, largest first."""
    import pandas as pd

    from analysis.stats import time_percent

    trace.require("kernels", "CUDA kernel data")
    kernels = trace.frame("kernels", ["device_id", "stream_id", "duration"])
    if device is not None:
        kernels = kernels[kernels["device_id"] == device]
    per = kernels.groupby(["device_id", "stream_id"])["duration"]
    out = pd.DataFrame({"Kernels": per.size(), "Total Time (ns)": per.sum()}).reset_index()
    out = out.rename(columns={"device_id": "Device", "stream_id": "Stream"})
    out = out.sort_values("Total Time (ns)", ascending=False, kind="stable", ignore_index=True)
    out.insert(0, "Time (%)", time_percent(out["Total Time (ns)"]))
    return out


TABLE = frame_table(
    "streams",
    "kernel time per stream",
    stream_table,
    summary="Kernel time per device and stream.",
    help="Kernels and their GPU time per device and stream, largest first. Several exports: one block "
    "per rank.",
    mirrors="nsys stats -r cuda_gpu_kern_sum, summed per stream",
    options=(Option("device", "--device", "Only this device's streams.", int, None, metavar="<n>"), TOP),
    order=75,
    deciding=("Device", "Stream", "Total Time (ns)"),
    in_summary=InSummary(("Kernel time per stream",), build=lambda by, stats_format: [stream_table]),
    example="harness streams report.sqlite --device 0",
)
'''


@pytest.fixture
def streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The module above on the registry's path, for this test only."""
    folder = tmp_path / "more_tables"
    folder.mkdir()
    (folder / "streams.py").write_text(STREAMS)
    monkeypatch.setattr(analysis.tables, "__path__", [*analysis.tables.__path__, str(folder)])
    monkeypatch.delitem(sys.modules, "analysis.tables.streams", raising=False)
    yield
    sys.modules.pop("analysis.tables.streams", None)


def rows(*args: str | Path) -> list[dict[str, str]]:
    done = runner.invoke(app, [*map(str, args), "--format", "csv"])
    assert done.exit_code == 0, done.output
    return list(csv.DictReader(io.StringIO(done.stdout)))


def test_a_table_module_is_a_command(streams: None, cache_dir: Path) -> None:
    export = need(SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite")
    assert "streams" in analysis.tables.names() and "streams" not in COMMANDS
    (row,) = rows("streams", export)
    assert [row[c] for c in ("Device", "Stream", "Kernels", "Total Time (ns)")] == ["0", "7", "5", "88573480"]
    listed = runner.invoke(app, ["--help"]).stdout
    assert any(line.split() == ["streams", "Kernel", "time", "per", "device", "and", "stream."]
               for line in listed.splitlines())  # fmt: skip
    own = runner.invoke(app, ["streams", "--help"]).stdout
    assert "--device <n>" in own and "Only this device's streams." in own and "--by-rank" in own
    assert "Example: harness streams report.sqlite --device 0" in own


def test_its_options_and_its_part_of_the_summary(streams: None, cache_dir: Path) -> None:
    export = need(SHARED_NSYS / "ext" / "torchrun_2gpu" / "report.sqlite")
    both = rows("streams", export)
    assert [(r["Device"], r["Stream"], r["Kernels"]) for r in both] == [("0", "7", "1993"),
                                                                      ("1", "15", "2017")]  # fmt: skip
    assert rows("streams", export, "--device", "1") == [r | {"Time (%)": "100.0"} for r in both[1:]]
    assert rows("streams", export, "--top", "1") == both[:1]
    summary = runner.invoke(app, ["summary", str(export), "--format", "csv", "--no-cache"])
    assert summary.exit_code == 0, summary.output
    assert "# Kernel time per stream\nTime (%),Device,Stream,Kernels,Total Time (ns)\n" in summary.stdout


def test_gone_from_the_path_it_is_no_command(cache_dir: Path) -> None:
    assert "streams" not in analysis.tables.names()
    done = runner.invoke(app, ["streams", "x.sqlite"])
    assert done.exit_code == 2 and "No such command 'streams'" in done.output
