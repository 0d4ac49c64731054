"""The tables in the format of the nsys a user has (analysis.tables.stats_format; the harness gives the
version of the nsys in use, harness.execution.nsys.find):
2022.4's gpukernsum rows per launch shape and [CUDA memcpy HtoD], or 2023.4's cuda_gpu_kern_sum rows per
name and [CUDA memcpy Host-to-Device]; `auto` follows HARNESS_STATS_FORMAT, else the nsys in use, else the
nsys that wrote the export. Values from the H100 export and its two oracles."""

from __future__ import annotations

import ast
import io
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import H100_DIR, ORACLES, REPO, shared_export
from typer.testing import CliRunner

from analysis.errors import OptionsError
from analysis.front.reading import read_tables
from analysis.tables import get
from analysis.tables import stats_format as sf
from harness.cli import app
from harness.execution.nsys import find

runner = CliRunner()
OLD = H100_DIR / "expected"
NEW = ORACLES / "nsys-2023.4" / "h100-medium"


def in_use(choice: str = sf.AUTO, nsys_version: str | None = None) -> str:
    """The format the tables print, as the table commands and the profilers ask for it."""
    return sf.chosen(choice, lambda: nsys_version or find.installed_version())


def csv_of(*args: str | Path, env: dict[str, str] | None = None) -> pd.DataFrame:
    result = runner.invoke(app, [str(a) for a in args] + ["--format", "csv"], env=env)
    assert result.exit_code == 0, result.output
    return pd.read_csv(io.StringIO(result.stdout))


def test_what_each_release_prints() -> None:
    assert sf.release("2023.4.4.54") == (2023, 4) and sf.release("nsys") is None
    assert not sf.kernels_by_name("2022.4") and sf.kernels_by_name("2023.1") and sf.kernels_by_name("2023.4")
    assert [sf.copy_label(k, v) for v in ("2022.4", "2023.2", "2023.3") for k in (1, 8)] == [
        "[CUDA memcpy HtoD]", "[CUDA memcpy DtoD]", "[CUDA memcpy HtoD]", "[CUDA memcpy DtoD]",
        "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Device]",
    ]  # fmt: skip
    # EXPORT: the release that wrote the export; the newest format where nothing says
    assert sf.kernels_by_name(sf.EXPORT, "2023.4.4.54") and not sf.kernels_by_name(sf.EXPORT, "2022.2.1.31")
    assert sf.resolve(sf.EXPORT, None) == (2023, 4)
    with pytest.raises(ValueError, match="not a stats format"):
        sf.check("latest")


@pytest.mark.parametrize(
    ("version", "kernels", "memops"),
    [("2022.4", OLD / "gpukernsum.csv", OLD / "gpumemtimesum.csv"),
     ("2023.4", NEW / "cuda_gpu_kern_sum.csv", NEW / "cuda_gpu_mem_time_sum.csv")],
)  # fmt: skip
def test_commands_print_the_format_asked_for(h100_export: Path, version: str, kernels: Path,
                                             memops: Path) -> None:  # fmt: skip
    ours = csv_of("kernels", h100_export, "--stats-format", version)
    pd.testing.assert_frame_equal(ours, pd.read_csv(kernels))
    assert len(ours) == (55 if version == "2022.4" else 21)
    result = runner.invoke(app, ["memops", str(h100_export), "--stats-format", version, "--format", "csv"])
    by_time = result.stdout.split("\n\n")[0].split("\n", 1)[1]  # "# GPU memory operations by time", rows
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(by_time)), pd.read_csv(memops))


def test_by_shape_in_2023_is_cuda_gpu_kern_gb_sum(h100_export: Path) -> None:
    ours = csv_of("kernels", h100_export, "--stats-format", "2023.4", "--by", "shape")
    pd.testing.assert_frame_equal(ours, pd.read_csv(NEW / "cuda_gpu_kern_gb_sum.csv"))


def test_the_summary_follows_the_format(h100_export: Path) -> None:
    result = runner.invoke(app, ["summary", str(h100_export), "--stats-format", "2023.4", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "[CUDA memcpy Host-to-Device]" in result.stdout and "[CUDA memcpy HtoD]" not in result.stdout
    assert "GridXYZ" not in result.stdout


def fake_nsys(tmp_path: Path, version: str) -> str:
    nsys = tmp_path / "nsys"
    nsys.write_text(f"#!/bin/sh\necho 'NVIDIA Nsight Systems version {version}-0'\n")
    nsys.chmod(0o755)
    return str(nsys)


@pytest.fixture
def auto(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """`auto` as a user has it: no HARNESS_STATS_FORMAT (conftest pins one), the nsys looked up afresh."""
    monkeypatch.delenv("HARNESS_STATS_FORMAT", raising=False)
    lookup = find.installed_version
    lookup.cache_clear()
    yield monkeypatch
    lookup.cache_clear()


def test_auto_follows_the_nsys_in_use(auto: pytest.MonkeyPatch, tmp_path: Path, h100_export: Path) -> None:
    auto.setenv("HARNESS_NSYS", fake_nsys(tmp_path, "2022.4.2.1"))
    assert in_use("auto") == "2022.4"
    assert "GridXYZ" in csv_of("kernels", h100_export).columns
    find.installed_version.cache_clear()
    auto.setenv("HARNESS_NSYS", fake_nsys(tmp_path, "2023.4.4.54"))
    assert in_use("auto") == "2023.4"
    assert len(csv_of("kernels", h100_export)) == 21
    # the nsys that recorded a run decides for that run's tables; the environment variable over both
    assert in_use("auto", nsys_version="2022.4.2.1") == "2022.4"
    auto.setenv("HARNESS_STATS_FORMAT", "2022.4")
    assert in_use("auto") == "2022.4" and in_use("2023.4") == "2023.4"


def test_without_nsys_the_export_decides(auto: pytest.MonkeyPatch, h100_export: Path,
                                         a100_export: Path) -> None:  # fmt: skip
    auto.setattr(find, "installed_version", lambda: None)
    assert in_use("auto") == sf.EXPORT
    assert len(csv_of("kernels", h100_export)) == 21  # written by nsys 2023.4
    assert "GridXYZ" in csv_of("kernels", a100_export).columns  # written by nsys 2022.2


def test_a_bad_format_is_one_line(auto: pytest.MonkeyPatch, h100_export: Path) -> None:
    auto.setenv("HARNESS_STATS_FORMAT", "newest")
    with pytest.raises(OptionsError, match="HARNESS_STATS_FORMAT=newest: not a stats format"):
        in_use("auto")
    result = runner.invoke(app, ["kernels", str(h100_export)])
    assert result.exit_code == 2 and "HARNESS_STATS_FORMAT=newest" in result.output
    assert "Traceback" not in result.output


def test_several_exports_combine_in_one_format(h100_export: Path, a100_export: Path) -> None:
    both = csv_of("kernels", h100_export, a100_export, "--stats-format", "2023.4")
    assert "GridXYZ" not in both.columns
    assert both["Instances"].sum() == 30_528 + 5
    shapes = csv_of("kernels", h100_export, a100_export, "--stats-format", "2022.4")
    assert {"GridXYZ", "BlockXYZ"} <= set(shapes.columns) and len(shapes) == 55 + 1


def test_one_function_is_called_stats_format() -> None:
    """The format a table prints is one concept with one name: the module analysis/tables/stats_format.py;
    the harness's resolver of the nsys in use is named for what it does."""
    named = [
        str(path.relative_to(REPO))
        for pkg in ("harness", "analysis")
        for path in sorted((REPO / pkg).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "stats_format"
    ]
    assert named == []
    assert in_use("2023.4") == "2023.4"


def titles_in(*args: str | Path) -> list[str]:
    result = runner.invoke(app, ["summary", *map(str, args), "--format", "csv"])
    assert result.exit_code == 0, result.output
    return [line[2:] for line in result.stdout.splitlines() if line.startswith("# ")]


def reports_in(titles: list[str]) -> list[str]:
    return [t.split(" in ")[0].rsplit("(", 1)[1].rstrip(")") for t in titles if "(" in t]


def test_the_summary_titles_name_the_reports_of_the_format_printed(h100_export: Path, a100_export: Path,
                                                                   cache_dir: Path) -> None:  # fmt: skip
    """Each table of the summary is titled with the report whose rows it prints: 2023.4's names where the
    rows are 2023.4's, 2022.4's where they are (each a file that release's `nsys stats` wrote)."""
    new = reports_in(titles_in(h100_export, "--stats-format", "2023.4"))
    assert new == [
        "cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum", "cuda_kern_exec_sum", "osrt_sum",
    ]  # fmt: skip
    assert all((NEW / f"{r}.csv").is_file() for r in new)
    old = reports_in(titles_in(h100_export, "--stats-format", "2022.4"))
    assert old == [
        "gpukernsum", "nvtxsum", "nvtxkernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "kernexecsum",
        "osrtsum",
    ]  # fmt: skip
    assert all((OLD / f"{r}.csv").is_file() for r in old)
    over = titles_in(h100_export, a100_export, "--stats-format", "2023.4")
    assert "CUDA kernels (cuda_gpu_kern_sum) in 2 exports" in over and "gpukernsum" not in str(over)

    # the format of the nsys that wrote each export: 2023.4 for the H100's, 2022.2 for the A100's
    def export_format(*paths: Path) -> list[str]:
        options = {"by": "op", "stats_format": sf.EXPORT}
        return [t for t, _ in read_tables("summary", list(paths), options).tables]

    assert "CUDA kernels (cuda_gpu_kern_sum)" in export_format(h100_export)
    assert "CUDA kernels (gpukernsum)" in export_format(a100_export)
    mixed = export_format(h100_export, a100_export)
    assert "GPU memory time (cuda_gpu_mem_time_sum / gpumemtimesum) in 2 exports" in mixed


def test_copies_of_exports_of_two_formats_are_named_one_way(h100_export: Path, a100_export: Path) -> None:
    """Each export in its own nsys's format names a copy two ways (2023.4: Host-to-Device, 2022.2: HtoD):
    over both, one row per copy kind, in the newer names, and a note says so."""
    options = {"stats_format": sf.EXPORT}
    both = read_tables("memops", [h100_export, a100_export], options)
    (_, by_time), (_, by_size) = both.tables
    assert list(by_time["Operation"]) == [
        "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]", "[CUDA memcpy Device-to-Device]",
    ]  # fmt: skip
    to_device = by_time.set_index("Operation").loc["[CUDA memcpy Host-to-Device]"]
    assert (to_device["Count"], to_device["Total Time (ns)"]) == (149 + 10, 251_332_273 + 186_001_123)
    assert by_size.set_index("Operation").loc["[CUDA memcpy Host-to-Device]", "Count"] == 149 + 10
    assert any("[CUDA memcpy HtoD]" in n and "Host-to-Device" in n for n in both.notes)
    summary = read_tables("summary", [h100_export, a100_export], {"by": "op", **options})
    memory = dict(summary.tables)["GPU memory time (cuda_gpu_mem_time_sum / gpumemtimesum) in 2 exports"]
    assert "[CUDA memcpy HtoD]" not in set(memory["Operation"])
    assert any("[CUDA memcpy HtoD]" in n for n in summary.notes)


def test_kernels_of_exports_of_two_formats_say_their_shapes_are_merged(h100_export: Path) -> None:
    """In each export's own format dlprof's (nsys 2022.1) kernels have a row per launch shape and the H100's
    (2023.4) a row per name: over both, a row per name, and a note says whose shapes were merged; `--by
    shape` gives each rank's block as its own table."""
    dlprof = shared_export("ext/dlprof_norelu")
    kernels = get("kernels")
    alone = read_tables("kernels", [dlprof], kernels.prepare(stats_format=sf.EXPORT))
    assert len(alone.tables[0][1]) == 33 and "GridXYZ" in alone.tables[0][1].columns
    options = kernels.prepare(stats_format=sf.EXPORT)
    both = read_tables("kernels", [dlprof, h100_export], options, by_rank=True)
    blocks = both.tables[0][1]
    assert "GridXYZ" not in blocks.columns and (blocks["Source"] == blocks["Source"].iloc[0]).sum() == 26
    assert any("launch shape" in n and "--by shape" in n for n in both.notes), both.notes
    shaped = read_tables(
        "kernels", [dlprof, h100_export], kernels.prepare(stats_format=sf.EXPORT, by="shape"), by_rank=True
    )
    table = shaped.tables[0][1]
    assert (table["Source"] == table["Source"].iloc[0]).sum() == 33
    assert not any("launch shape" in n for n in shaped.notes)
