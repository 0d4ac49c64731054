"""A table read from an export whose capture failed its health checks says so: the verdict is kept in the
export's cache entry wherever the checks run, and every table read afterwards names the failed checks."""

from __future__ import annotations

import io
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from export_data import derive
from reading import flat
from typer.testing import CliRunner

from analysis import front
from harness.cli import app

pytestmark = pytest.mark.usefixtures("cache_dir")
runner = CliRunner()
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def _warning(export: Path) -> str:
    return (
        f"warning: {export} failed its health checks (GPU work recorded once): the numbers read from it may "
        f"be wrong; `harness health {export}` says why"
    )


def _twice(a100_export: Path, tmp_path: Path) -> Path:
    """The a100 export with every kernel row written twice: `kernels` counts 10 instances, health fails."""
    return derive(a100_export, tmp_path / "twice.sqlite", f"INSERT INTO {KERNELS} SELECT * FROM {KERNELS}")


def _stderr(*args: str) -> tuple[str, str]:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout, flat(result.stderr)


def test_a_table_of_a_capture_that_failed_health_says_so(a100_export: Path, tmp_path: Path) -> None:
    export = _twice(a100_export, tmp_path)
    table, said = _stderr("kernels", str(export), "-f", "csv")
    assert "failed its health checks" not in said  # not known yet: the checks are not run at each read
    assert runner.invoke(app, ["health", str(export), "--strict"]).exit_code == 1
    for fmt in ("csv", "json", "table"):  # served from the cache now, the verdict with it
        _, said = _stderr("kernels", str(export), "-f", fmt)
        assert _warning(export) in said
    again, said = _stderr("kernels", str(export), "-f", "csv")
    assert again == table and pd.read_csv(io.StringIO(again))["Instances"].sum() == 10
    _, said = _stderr("nvtx", str(export), "-f", "csv")  # every table of the export, computed or kept
    assert _warning(export) in said
    _, said = _stderr("breakdown", str(export), "-f", "csv")
    assert _warning(export) in said
    _, said = _stderr("kernels", str(export), "-f", "csv", "--no-cache")
    assert "failed its health checks" not in said  # without the cache nothing kept is read


def test_a_timeline_of_a_capture_that_failed_health_says_so(a100_export: Path, tmp_path: Path) -> None:
    """`timeline` wrote the Chrome trace of a failed capture with nothing said, where every table says so."""
    export = _twice(a100_export, tmp_path)
    assert runner.invoke(app, ["health", str(export), "--strict"]).exit_code == 1
    _, said = _stderr("timeline", str(export), "-o", str(tmp_path / "t.json"))
    assert _warning(export) in said and (tmp_path / "t.json").exists()
    _, said = _stderr("timeline", str(a100_export), "-o", str(tmp_path / "sound.json"))
    assert "failed its health checks" not in said


def test_over_several_exports_only_the_failed_capture_is_named(a100_export: Path, tmp_path: Path) -> None:
    export = _twice(a100_export, tmp_path)
    healthy = tmp_path / "healthy.sqlite"
    shutil.copy(a100_export, healthy)
    for path in (export, healthy):
        runner.invoke(app, ["health", str(path)])
    _, said = _stderr("kernels", str(healthy), "-f", "csv")
    assert "failed its health checks" not in said
    _, said = _stderr("kernels", str(export), str(healthy), "-f", "csv")
    assert said.count("failed its health checks") == 1 and _warning(export) in said


def test_a_mended_export_is_judged_anew(a100_export: Path, tmp_path: Path) -> None:
    """The verdict belongs to the export as it was: written again (the repeated rows deleted), it has none."""
    export = _twice(a100_export, tmp_path)
    runner.invoke(app, ["health", str(export)])
    with sqlite3.connect(export) as db:
        db.execute(f"DELETE FROM {KERNELS} WHERE rowid > (SELECT COUNT(*) / 2 FROM {KERNELS})")
    db.close()
    table, said = _stderr("kernels", str(export), "-f", "csv")
    assert "failed its health checks" not in said
    assert pd.read_csv(io.StringIO(table))["Instances"].sum() == 5


def test_a_notebook_table_carries_the_warning(a100_export: Path, tmp_path: Path) -> None:
    export = _twice(a100_export, tmp_path)
    report = front.open(export)
    assert report.table("kernels").attrs["warnings"] == []
    assert report.health().attrs["worst"] == "fail"
    table = report.table("kernels")
    assert table["Instances"].sum() == 10
    assert table.attrs["warnings"] == [_warning(export).removeprefix("warning: ")]


def test_a_diff_names_the_side_whose_capture_failed(a100_export: Path, tmp_path: Path) -> None:
    export = _twice(a100_export, tmp_path)
    healthy = tmp_path / "healthy.sqlite"
    shutil.copy(a100_export, healthy)
    runner.invoke(app, ["health", str(export)])
    _, said = _stderr("diff", str(healthy), str(export), "-f", "json")  # exit 0: no gate asked
    assert said.count("failed its health checks") == 1 and _warning(export) in said


def test_ranks_names_the_export_whose_capture_failed(a100_export: Path, tmp_path: Path) -> None:
    """`harness ranks` printed GPU busy time and kernel counts of a failed capture without a word."""
    export = _twice(a100_export, tmp_path)
    healthy = tmp_path / "healthy.sqlite"
    shutil.copy(a100_export, healthy)
    runner.invoke(app, ["health", str(export)])
    for fmt in ("table", "csv"):
        table, said = _stderr("ranks", str(healthy), str(export), "-f", fmt)
        assert said.count("failed its health checks") == 1 and _warning(export) in said
    per_rank = table.split("# GPU and communication per rank\n")[1].split("\n\n")[0]
    assert pd.read_csv(io.StringIO(per_rank))["Kernels"].tolist() == [5, 10]  # the tables stand, warned of
    _, said = _stderr("ranks", str(export), "-f", "csv", "--no-cache")
    assert "failed its health checks" not in said
