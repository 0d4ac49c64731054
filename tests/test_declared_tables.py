"""Each table's declaration (its module's TABLE, analysis/tables/<name>.py) decides how the front door
(analysis.front.reading) serves it: kept in the export's cache entry and served from there, computed each
time, given --top itself, or computed without pandas. Flipping a declared property changes what the command
does, with no table name anywhere else."""

from __future__ import annotations

import csv
import importlib
import io
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_NSYS, need
from typer.testing import CliRunner

from analysis import tables
from harness.cli import app

runner = CliRunner()


def export_of(fixture: str) -> Path:
    return need(SHARED_NSYS / fixture / "report.sqlite")


def csv_of(*args: str | Path) -> list[dict[str, str]]:
    done = runner.invoke(app, [*map(str, args), "--format", "csv"])
    assert done.exit_code == 0, done.output
    return list(csv.DictReader(io.StringIO(done.stdout)))


def counting(monkeypatch: pytest.MonkeyPatch, kind: str, field: str = "one") -> list[int]:
    """Count the calls of the table's way of computing `kind` (`one`), or of its `without_pandas`."""
    calls: list[int] = []

    def counted(compute: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return compute(*args, **kwargs)

        return call

    if field == "one":
        declare(monkeypatch, kind, one=counted(tables.get(kind).one))
    else:
        light = tables.get(kind).without_pandas
        assert light is not None
        declare(monkeypatch, kind, without_pandas=counted(light))
    return calls


def module_of(kind: str) -> Any:
    return importlib.import_module(f"analysis.tables.{kind.replace('-', '_')}")


def declare(monkeypatch: pytest.MonkeyPatch, kind: str, **changes: Any) -> None:
    monkeypatch.setattr(module_of(kind), "TABLE", replace(tables.get(kind), **changes))


def test_every_table_module_is_in_the_registry() -> None:
    for name in tables.names():
        assert tables.get(name) is module_of(name).TABLE
    served = {t.name for t in tables.all() if t.served_from_cache}
    assert served == {"kernels", "nvtx-gpu", "summary"}
    assert {t.name for t in tables.all() if t.takes_top} == {"nvtx-gpu"}


def test_declarations_load_neither_pandas_nor_numpy() -> None:
    code = (
        "import sys, analysis.tables; analysis.tables.all(); "
        "print([m for m in ('pandas', 'numpy') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert done.stdout.strip() == "[]", done.stderr


def test_a_table_declared_not_served_from_cache_is_computed_each_time(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = export_of("a100-saxpy-mpi")
    calls = counting(monkeypatch, "api")
    first, second = csv_of("api", export), csv_of("api", export)
    assert first == second and len(first) > 1
    assert len(calls) == 2
    assert not list(cache_dir.rglob("result.api.*.json"))


def test_a_table_declared_served_from_cache_is_kept_and_served(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same `api`, declared kept: computed once, then served from the export's cache entry."""
    export = export_of("a100-saxpy-mpi")
    declare(monkeypatch, "api", served_from_cache=True)
    calls = counting(monkeypatch, "api")
    first, second = csv_of("api", export), csv_of("api", export)
    assert first == second and len(first) > 1
    assert len(calls) == 1
    assert len(list(cache_dir.rglob("result.api.*.json"))) == 1


def test_kernels_declared_not_served_from_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kernels, declared kept, is computed once (without pandas); declared not kept, each time."""
    export = export_of("a100-saxpy-mpi")
    calls = counting(monkeypatch, "kernels", "without_pandas")
    assert csv_of("kernels", export) == csv_of("kernels", export)
    assert len(calls) == 1
    declare(monkeypatch, "kernels", served_from_cache=False)
    calls = counting(monkeypatch, "kernels", "without_pandas")
    rows = csv_of("kernels", export, "--by", "name")
    assert rows == csv_of("kernels", export, "--by", "name")
    assert len(calls) == 2
    assert rows[0]["Total Time (ns)"] == "88573480"


def test_a_table_without_a_pandas_free_way_is_computed_by_the_registry(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = export_of("a100-saxpy-mpi")
    light = csv_of("kernels", export, "--no-cache")
    declare(monkeypatch, "kernels", without_pandas=None)
    calls = counting(monkeypatch, "kernels")
    assert csv_of("kernels", export, "--no-cache") == light
    assert len(calls) == 1


def test_nvtx_gpu_takes_top_per_range(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvtx-gpu --kernels --top 1: the table keeps the first kernel of each range (declared takes_top);
    declared otherwise, --top would cut the table to its first row."""
    export = export_of("ext/dlprof_norelu")
    whole = csv_of("nvtx-gpu", export, "--kernels")
    each = csv_of("nvtx-gpu", export, "--kernels", "--top", "1")
    ranges = {(r["NVTX Range"], r["PID"], r["TID"]) for r in whole}
    assert len(ranges) > 1 and len(whole) > len(ranges)
    assert sorted((r["NVTX Range"], r["PID"], r["TID"]) for r in each) == sorted(ranges)
    declare(monkeypatch, "nvtx-gpu", takes_top=False)
    assert csv_of("nvtx-gpu", export, "--kernels", "--top", "1") == whole[:1]
