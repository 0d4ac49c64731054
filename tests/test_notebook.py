"""The notebook door (`analysis.front.open`) on real H100 captures kept in the repository: health, findings
and figures as `harness health`, `harness advise` and the dashboard give them, as DataFrames and plotly
figures; an untrusted capture gives no ranking unless asked."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis import front
from analysis.errors import AnalysisError
from analysis.front.notebook import UntrustedCapture
from harness.cli import app

DATA = Path(__file__).parent / "data" / "h100"


@pytest.fixture(scope="module")
def exports(h100_captures: dict[str, Path]) -> dict[str, Path]:
    return h100_captures


def cli_json(*args: str) -> object:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_health_is_the_table_harness_health_prints(exports: dict[str, Path], cache_dir: Path) -> None:
    health = front.open(exports["tiny-cupti13"]).health()
    assert list(health.columns) == ["Check", "Status", "Evidence", "What to do"]
    assert len(health) == 12
    # nsys's own time in its phases is all in the warm-up steps': none in the measured steps' phases
    assert health.set_index("Check").loc["nsys overhead", "Status"] == "ok"
    assert health.attrs["worst"] == "ok"
    assert health.attrs["line"] == "health ok: 12 checks"
    printed = cli_json("health", str(exports["tiny-cupti13"]))
    assert health.to_dict("records") == printed["health"]  # type: ignore[index]


def test_findings_are_the_table_harness_advise_prints(exports: dict[str, Path], cache_dir: Path) -> None:
    found = front.open(exports["tiny-cupti13"]).findings()
    # the GPU's wait on the host, less what the harness's own phase clock caused; its syncs are no finding;
    # nsys's own time in its phases is all in the warm-up steps' (51.327 ms), none in the measured ones'
    assert found["Rule"].tolist() == ["gpu-host-wait", "fp32-gemm"]
    assert found["Time at stake (ns)"].tolist() == [104502609, 8404882]
    assert found.attrs["untrusted"] == []
    printed = cli_json("advise", str(exports["tiny-cupti13"]))
    assert found.to_dict("records") == printed["findings"]


def test_thresholds_by_name_change_what_fires(exports: dict[str, Path], cache_dir: Path) -> None:
    report = front.open(exports["tiny-cupti13"])
    assert "gpu-host-wait" not in report.findings(host_wait_share=0.99)["Rule"].tolist()
    with pytest.raises(AnalysisError, match="host_wait"):
        report.findings(host_wait=0.5)


def test_an_untrusted_capture_gives_no_ranking_unless_asked(
    exports: dict[str, Path], cache_dir: Path
) -> None:
    report = front.open(exports["tiny-cupti12.4"])
    assert report.health().attrs["worst"] == "fail"
    said = r"failed GPU coverage \(1 of 3 measured steps \(step 1 of steps 1–3\) launches"
    with pytest.raises(UntrustedCapture, match=said):
        report.findings()
    anyway = report.findings(ignore_health=True)
    assert anyway.attrs["untrusted"] == ["GPU coverage"]
    # what the GPU waited for there was the harness's own clock: nothing left to rank, at any threshold
    assert anyway["Rule"].tolist() == []
    assert report.findings(ignore_health=True, host_wait_share=0.0)["Rule"].tolist() == []


def test_figures_are_the_dashboard_panels(exports: dict[str, Path], cache_dir: Path) -> None:
    report = front.open(exports["tiny-cupti13"])
    kernels = report.figure("kernels")
    bars = kernels.data[0]
    top = report.table("kernels", stats_format="2022.4")  # the dashboard's format
    assert list(bars.x[::-1][:3]) == pytest.approx((top["Total Time (ns)"].head(3) / 1e6).tolist())
    assert bars.y[-1].startswith("1. void cutlass::Kernel2&lt;cutlass_80_simt_sgemm_25")  # plotly shows <
    assert kernels.layout.title.text == "Top kernels by total GPU time: tiny-cupti13.sqlite"
    (phases,) = report.figure("nvtx").data  # GPU time per phase, as `harness nvtx-gpu` gives it
    assert dict(zip(phases.x, phases.y, strict=True)) == pytest.approx(
        {"backward": 9.708748, "forward": 4.833316, "optimizer": 3.894752}
    )
    assert report.figure("timeline").data
    with pytest.raises(AnalysisError, match="no figure 'phases': one of kernels, nvtx, timeline"):
        report.figure("phases")


def test_what_reads_one_capture_refuses_several(exports: dict[str, Path]) -> None:
    both = front.open([exports["tiny-cupti13"], exports["tiny-cupti12.4"]])
    for ask in (both.health, both.findings, both.figure):
        with pytest.raises(AnalysisError, match=r"reads one export or trace, not .*: open it alone"):
            ask()


def test_a_table_as_csv_is_what_the_command_line_writes(exports: dict[str, Path], cache_dir: Path) -> None:
    """The same numbers by both doors: `harness kernels --format csv` read back equals the DataFrame."""
    export = exports["tiny-cupti13"]
    result = CliRunner().invoke(app, ["kernels", str(export), "--format", "csv", "--stats-format", "2023.4"])
    assert result.exit_code == 0, result.output
    printed = pd.read_csv(io.StringIO(result.stdout))
    table = front.open(export).table("kernels", stats_format="2023.4")
    assert printed["Name"].tolist() == table["Name"].tolist()
    assert printed["Total Time (ns)"].tolist() == table["Total Time (ns)"].tolist()
    assert int(table["Instances"].sum()) == 3444


def test_what_reads_one_capture_names_a_missing_file_or_a_folder(tmp_path: Path) -> None:
    """One path that is not a file: said as what it is, not as several exports."""
    from analysis.errors import ExportError

    missing = front.open(tmp_path / "nope.sqlite")
    for ask in (missing.health, missing.findings, missing.figure):
        with pytest.raises(ExportError, match=r"no such export: .*nope\.sqlite$"):
            ask()
    with pytest.raises(AnalysisError, match=r"reads one export or trace, not the folder .*: open one$"):
        front.open(tmp_path).health()
