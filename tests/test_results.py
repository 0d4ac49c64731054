"""Computed tables kept in the cache (analysis/trace/results.py): a warm `harness kernels` served without
pandas
prints the same bytes as the table computed from the trace, in every format, on every fixture."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SHARED_NSYS, need
from typer.testing import CliRunner

import analysis.stats
import analysis.tables.kernels
from analysis.trace import results
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
FIXTURES = ["a100-saxpy-mpi", *(f"ext/{n}" for n in ("beast1", "dlprof_norelu", "fuser_report1",
                                                     "llama3_realsim", "torchrun_2gpu"))]  # fmt: skip
OPTIONS = [
    [],
    ["--top", "3"],
    ["--by", "name"],
    ["--base"],
    ["--mangled", "--wide"],
    ["--limit", "2"],
]


def export_of(fixture: str) -> Path:
    return need(SHARED_NSYS / fixture / "report.sqlite")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(folder))
    monkeypatch.setenv("COLUMNS", "110")
    monkeypatch.setenv("LINES", "24")
    return folder


def kernels(*args: str | Path) -> tuple[str, str]:
    result = runner.invoke(app, ["kernels", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


@pytest.mark.parametrize("fixture", FIXTURES)
def test_served_equals_computed_in_every_format(
    fixture: str, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = export_of(fixture)
    for fmt in ("table", "csv", "json"):
        for opts in OPTIONS:
            args = [export, "--format", fmt, *opts]
            computed = kernels(*args, "--no-cache")  # never kept
            cold = kernels(*args)  # computed, frames and table kept
            with monkeypatch.context() as m:  # served: the table is not computed again
                m.setattr(analysis.tables.kernels, "kernel_summary", _not_called)
                served = kernels(*args)
            assert cold == computed, (fmt, opts)
            assert served == computed, (fmt, opts)
            if fmt == "json" and not opts:
                assert json.loads(served[0])[0]["Instances"] >= 1


def _not_called(*args: object, **kwargs: object) -> None:
    raise AssertionError("the warm command computed the table again")


def kept(export: Path, options: dict[str, object]) -> results.Kept | None:
    """What `harness kernels EXPORT` with `options` kept."""
    return results.cached(export, "kernels", {**options, "file": export.name})


def test_result_file_holds_the_table(cache: Path) -> None:
    export = export_of("a100-saxpy-mpi")
    kernels(export, "--format", "csv")
    options = {"names": "demangled", "by": None, "range_name": None, "stats_format": "2022.4"}
    served = kept(export, options)
    assert served is not None and served.tables[0][0] == "CUDA kernels in report.sqlite"
    rows = served.tables[0][1]
    assert len(rows) == 1
    assert rows.columns[:3] == ["Time (%)", "Total Time (ns)", "Instances"]
    assert rows.rows[0][1:3] == (88_573_480, 5)  # the oracle's gpukernsum: 5 saxpy launches
    assert rows.kinds[:3] == ["f", "i", "i"]
    assert kept(export, {**options, "by": "name"}) is None  # not asked for yet


def test_changed_export_is_not_served(cache: Path, tmp_path: Path) -> None:
    export = tmp_path / "report.sqlite"
    shutil.copyfile(export_of("a100-saxpy-mpi"), export)
    options = {"names": "demangled", "by": None, "range_name": None, "stats_format": "2022.4"}
    kernels(export, "--format", "csv")
    assert kept(export, options) is not None
    with open(export, "r+b") as f:  # SQLite's change counter (bytes 24-27), size and mtime kept
        st = os.stat(export)
        f.seek(24)
        counter = int.from_bytes(f.read(4), "big")
        f.seek(24)
        f.write((counter + 1).to_bytes(4, "big"))
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert kept(export, options) is None


def test_nothing_kept_without_a_cache(cache: Path) -> None:
    export = export_of("a100-saxpy-mpi")
    kernels(export, "--no-cache")
    assert not cache.exists() or not list(cache.rglob("result.*"))
    trace = open_trace(export, cache=False)
    assert trace.cache_entry is None
    assert not results.keep(trace, "kernels", {}, [("t", analysis.tables.kernels.kernel_summary(trace))])


def test_changed_analysis_code_is_not_served(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = export_of("a100-saxpy-mpi")
    options = {"names": "demangled", "by": None, "range_name": None, "stats_format": "2022.4"}
    kernels(export, "--format", "csv")
    assert kept(export, options) is not None
    monkeypatch.setattr(results, "code_stamp", lambda: "another version")
    assert kept(export, options) is None


def test_code_stamp_sees_every_sub_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed module in any sub-folder of analysis/, however deep or new, changes the stamp."""
    root = tmp_path / "analysis"
    here = root / Path(results.__file__).resolve().relative_to(REPO / "analysis")
    deep = root / "rooms" / "inner" / "mod.py"
    for path in (here, root / "readers" / "r.py", deep):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
    monkeypatch.setattr(results, "__file__", str(here))
    stamp = results.code_stamp.__wrapped__  # once per process in use; here each call looks again
    before = stamp()
    (root / "rooms" / "inner" / "notes.txt").write_text("not a module\n")
    assert stamp() == before
    deep.write_text("x = 22\n")
    assert stamp() != before


def test_control_characters_escaped_the_same(cache: Path, tmp_path: Path) -> None:
    from export_data import derive

    odd = derive(
        export_of("a100-saxpy-mpi"),
        tmp_path / "odd.sqlite",
        "UPDATE StringIds SET value = 'k\x1b]0;x\x07, \"q\"' WHERE id = 670",
    )
    for fmt in ("table", "csv", "json"):
        computed = kernels(odd, "--format", fmt, "--no-cache")
        kernels(odd, "--format", fmt)
        assert kernels(odd, "--format", fmt) == computed
    assert "\x1b" not in computed[0]


def harness_alone(args: list[str], assertion: str) -> subprocess.CompletedProcess[str]:
    """`harness ARGS --format csv` in a fresh process that then asserts `assertion` (on sys.modules)."""
    code = (
        "import sys; from harness.cli import main; sys.argv = ['harness', *sys.argv[1:], '--format', 'csv']"
        f"\ntry:\n main()\nexcept SystemExit:\n pass\nassert {assertion}, 'imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("command", [["kernels"], ["summary"], ["nvtx-gpu"], ["nvtx-gpu", "--kernels"]])
def test_warm_command_imports_no_pandas(command: list[str], cache: Path) -> None:
    export = export_of("a100-saxpy-mpi")
    first = runner.invoke(app, [*command, str(export), "--format", "csv"])
    assert first.exit_code == 0, first.output
    done = harness_alone(
        [*command, str(export)], "'pandas' not in sys.modules and 'numpy' not in sys.modules"
    )
    assert done.stdout == first.stdout
    if command == ["kernels"]:
        assert done.stdout.splitlines()[1].startswith("100.0,88573480,5,")


def test_new_kernels_table_on_a_cached_export_imports_no_pandas(cache: Path) -> None:
    """A table not asked for before (--by name), its export's columns in the cache: pyarrow and numpy, no
    pandas (issue 24 §3: under a third of nsys stats needs to stay below pandas' import)."""
    export = export_of("a100-saxpy-mpi")
    assert runner.invoke(app, ["kernels", str(export), "--format", "csv"]).exit_code == 0  # fills the cache
    done = harness_alone(
        ["kernels", str(export), "--by", "name"], "'pandas' not in sys.modules and 'numpy' in sys.modules"
    )
    with_pandas = runner.invoke(
        app, ["kernels", str(export), "--by", "name", "--format", "csv", "--no-cache"]
    )
    assert done.stdout == with_pandas.stdout
    assert done.stdout.splitlines()[1].startswith("100.0,88573480,5,")


@pytest.mark.parametrize("by", ["shape", "name"])
def test_cold_kernels_imports_no_pandas(by: str, cache: Path) -> None:
    """Nothing cached yet: the export read through the reader, its columns and strings put in the cache,
    the table printed, and no pandas (issue 24 §3, cold: its import was a third of the time). What went
    into the cache without pandas serves the other table as the export does."""
    export = export_of("a100-saxpy-mpi")
    other = "name" if by == "shape" else "shape"

    def computed(by: str) -> str:
        done = runner.invoke(app, ["kernels", str(export), "--by", by, "--format", "csv", "--no-cache"])
        assert done.exit_code == 0, done.output
        return done.stdout

    cold = harness_alone(["kernels", str(export), "--by", by], "'pandas' not in sys.modules")
    assert {p.name for p in cache.rglob("*.parquet")} >= {"kernels.duration.parquet", "strings.value.parquet"}
    assert cold.stdout == computed(by)
    assert cold.stdout.splitlines()[1].startswith("100.0,88573480,5,")
    then = harness_alone(["kernels", str(export), "--by", other], "'pandas' not in sys.modules")
    assert then.stdout == computed(other)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_rows_render_as_their_dataframe(fixture: str, cache: Path) -> None:
    """kernel_table (no pandas) and the DataFrame of the same table print the same bytes in every format,
    and JSON's records are those pandas writes."""
    from harness.cli.terminal.output import emit

    trace = open_trace(export_of(fixture), cache=False)
    for options in ({}, {"by": "name"}, {"names": "base"}, {"names": "mangled"}):
        rows = analysis.tables.kernels.kernel_table(trace, **options)  # type: ignore[arg-type]
        frame = rows.frame()
        assert rows.kinds == [frame[c].dtype.kind for c in frame.columns]
        assert rows.records == json.loads(frame.to_json(orient="records", double_precision=15))
        for fmt in ("table", "csv", "json"):
            for top in (None, 2):
                outs = []
                for table in (rows, frame):
                    buffer = io.StringIO()
                    emit(table.head(top) if top else table, fmt, title="t", notes=["n"], file=buffer)  # type: ignore[arg-type]
                    outs.append(buffer.getvalue())
                assert outs[0] == outs[1], (fixture, options, fmt, top)


def test_json_records_of_rounded_floats_are_pandas() -> None:
    """Floats rounded to one decimal (every float of the tables kept) read back from pandas' to_json as
    Rows.computed writes them."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(7)
    values = np.concatenate([np.floor(rng.random(20_000) * 10.0 ** rng.integers(1, 15, 20_000)) / 10, [0.0]])
    values = analysis.stats.round_half_up(values)
    rows = results.Rows.computed(["x"], ["f"], [[v] for v in values.tolist()], {})
    assert rows.records == json.loads(
        pd.DataFrame({"x": values}).to_json(orient="records", double_precision=15)
    )


COMMANDS = [
    ["summary"],
    ["summary", "--raw-names", "--top", "3"],
    ["nvtx-gpu"],
    ["nvtx-gpu", "--kernels", "--mode", "thread"],
    ["nvtx-gpu", "--projection"],
]


@pytest.mark.parametrize("fixture", ["a100-saxpy-mpi", "ext/dlprof_norelu", "ext/torchrun_2gpu"])
def test_summary_and_nvtx_gpu_served_equal_computed(
    fixture: str, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import analysis.tables.nvtx_gpu
    import analysis.tables.summary

    export = export_of(fixture)
    for command in COMMANDS:
        for fmt in ("table", "csv", "json"):
            args = [*command, str(export), "--format", fmt]
            computed = runner.invoke(app, [*args, "--no-cache"])
            runner.invoke(app, args)  # computed and kept
            with monkeypatch.context() as m:
                for module in (analysis.tables.summary, analysis.tables.nvtx_gpu):
                    for name in ("summary", "nvtx_gpu_summary", "nvtx_gpu_kernels", "nvtx_gpu_projection"):
                        if hasattr(module, name):
                            m.setattr(module, name, _not_called)
                served = runner.invoke(app, args)
            assert (served.exit_code, served.stdout, served.stderr) == (
                computed.exit_code,
                computed.stdout,
                computed.stderr,
            ), (command, fmt)
