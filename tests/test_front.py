"""The front door for reading (analysis.front): a table from the sources named, served from the cache where
its declaration keeps it, else computed and kept; reports exported only through the callable given; the
same from Python (`front.open`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from conftest import SHARED_NSYS, need
from export_data import distinct_copy

import analysis.tables.kernels
from analysis import front
from analysis.errors import ExportError
from analysis.front.reading import read_tables
from analysis.tables.kernels import kernel_summary
from analysis.tables.summary import summary
from analysis.trace.opening import open_trace


@pytest.fixture
def export() -> Path:
    return need(SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite")


def copying(export: Path, asked: list[Path]) -> Callable[[Path, Path], Path]:
    """An exporter standing for nsys: each report it is asked for noted in `asked`, `export` copied to the
    target."""

    def exported(path: Path, target: Path) -> Path:
        asked.append(path)
        shutil.copyfile(export, target)
        return target

    return exported


def test_only_a_report_goes_through_export(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not read here: the export callable stands for nsys")
    asked: list[Path] = []
    exported = copying(export, asked)

    direct = read_tables("api", [export], export=exported)
    assert asked == []
    through = read_tables("api", [report], export=exported, cache=False)
    assert asked == [report]
    assert through.tables[0][1].equals(direct.tables[0][1])
    assert not list(tmp_path.glob("*.sqlite"))  # never beside the user's report
    with pytest.raises(ExportError, match=r"run\.nsys-rep is an nsys report, not an export"):
        read_tables("api", [report])


def test_a_report_is_exported_once_into_the_cache(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    asked: list[Path] = []
    exported = copying(export, asked)

    first = read_tables("api", [report], export=exported)
    again = read_tables("kernels", [report], export=exported)
    assert asked == [report]  # the second table read the export kept in the cache folder
    assert len(first.tables[0][1]) == len(read_tables("api", [export]).tables[0][1])
    assert len(list((cache_dir / "exports").glob("*.sqlite"))) == 1 and again.tables
    beside = report.with_suffix(".sqlite")  # as `harness run --nsys` leaves it, newer than the report
    shutil.copyfile(export, beside)
    read_tables("api", [report], export=exported)
    assert asked == [report]


def test_a_failed_export_leaves_nothing(tmp_path: Path, cache_dir: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")

    def failing(path: Path, target: Path) -> Path:
        target.write_bytes(b"half an export")
        raise ExportError(f"cannot export {path}")

    with pytest.raises(ExportError, match="cannot export"):
        read_tables("api", [report], export=failing)
    assert not [p for p in (cache_dir / "exports").iterdir() if p.is_file()]


def test_a_kept_table_is_served_not_computed(
    export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"names": "demangled", "by": None, "range_name": None, "hta": False, "stats_format": "2022.4"}
    computed = read_tables("kernels", [export], options, top=1)
    (title, rows), *_ = computed.tables
    assert title == "CUDA kernels in report.sqlite" and len(rows) == 1
    monkeypatch.setattr(analysis.tables.kernels, "kernel_table", None)  # served: nothing computes it
    served = read_tables("kernels", [export], options, top=1)
    assert served.tables[0][1].rows == rows.rows and served.notes == computed.notes
    assert rows.attrs["deciding"] == ["Name", "Total Time (ns)", "Time (%)", "Instances"]


def test_open_gives_dataframes(export: Path, cache_dir: Path) -> None:
    report = front.open(export)
    kernels = report.table("kernels")
    expected = kernel_summary(open_trace(export, cache=False))
    pd.testing.assert_frame_equal(kernels, expected, check_like=False, check_exact=True, check_flags=False)
    again = report.table("kernels")  # served from the cache entry this time, as a DataFrame still
    pd.testing.assert_frame_equal(again, kernels)
    titles = [title for title, _ in summary(open_trace(export, cache=False)).tables]
    assert list(report.tables("summary")) == titles
    assert report.table("kernels", by="name", names="base")["Name"].tolist() == ["saxpy"]


def test_open_several_sources(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    for rank in (0, 1):
        distinct_copy(export, tmp_path / f"run.rank{rank}.sqlite")
    both = front.open(sorted(tmp_path.glob("run.rank*.sqlite")), jobs=1).table("kernels")
    assert both["Instances"].tolist() == [10] and both["Total Time (ns)"].tolist() == [2 * 88573480]
    per_rank = front.open(tmp_path / "run.rank*.sqlite", by_rank=True, jobs=1).table("kernels")
    assert per_rank["Rank"].tolist() == [0, 1] and per_rank["Instances"].tolist() == [5, 5]


def test_a_served_table_is_the_computed_frame(cache_dir: Path) -> None:
    """The launch table of dlprof_norelu has missing queue times (Int64 with NA): served from the cache it
    is the same frame as computed (text as object columns)."""
    dlprof = need(SHARED_NSYS / "ext" / "dlprof_norelu" / "report.sqlite")
    computed = front.open(dlprof, cache=False).tables("summary")
    front.open(dlprof).tables("summary")  # computed and kept
    served = front.open(dlprof).tables("summary")
    assert list(served) == list(computed)
    launch = served["Launch latency (kernexecsum)"]
    assert str(launch["QMin (ns)"].dtype) == "Int64" and launch["QMin (ns)"].isna().any()
    for title, df in computed.items():
        pd.testing.assert_frame_equal(served[title], df, check_flags=False, check_dtype=False)


def test_options_from_python_that_no_table_knows_are_refused(export: Path, cache_dir: Path) -> None:
    """The command line checks --top and --by; from Python, top=-1 kept all rows but the last (pandas'
    head(-1)), top=0 all of them, and by="zzz" gave the table by name as if asked: each is refused now, as
    nvtx's by is, and a table computed before is no excuse."""
    from analysis.errors import OptionsError

    report = front.open(export)
    assert len(report.table("kernels", by="shape", top=1)) == 1
    for wrong in ({"top": -1}, {"top": 0}, {"top": 1.5}, {"by": "zzz"}, {"names": "short"}):
        with pytest.raises(OptionsError, match=next(iter(wrong))):
            report.table("kernels", **wrong)


@pytest.mark.parametrize("kind", ["kernels", "nvtx", "api"])
def test_an_option_no_table_takes_is_named_with_the_table(export: Path, cache_dir: Path, kind: str) -> None:
    """A misspelt keyword raised TypeError naming a private helper (`_asked() got an unexpected keyword
    argument`): it is the table's option that is refused."""
    from analysis.errors import OptionsError

    with pytest.raises(OptionsError, match=rf"^{kind} takes no option 'rnage_name': its options are"):
        front.open(export).table(kind, rnage_name="saxpy")


def test_open_with_no_source_says_so() -> None:
    from analysis.errors import AnalysisError

    with pytest.raises(AnalysisError, match="given none"):
        front.open([])


def test_two_commands_exporting_one_report_at_once(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    """Two commands reading one report at once export it at once: each wrote the same partial file, and the
    second to finish found it renamed away by the first (FileNotFoundError, a traceback). Each writes its
    own partial file now; both read the whole export."""
    import threading

    from analysis.trace.exports import sqlite_for

    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    data = export.read_bytes()
    both = threading.Barrier(2, timeout=10)

    def slow(path: Path, target: Path) -> None:  # as nsys export: the file written in pieces
        with open(target, "wb") as f:
            f.write(data[: len(data) // 2])
            both.wait()  # the other command is exporting too
            f.write(data[len(data) // 2 :])

    got: list[object] = []

    def read() -> None:
        try:
            got.append(sqlite_for(report, slow).read_bytes())
        except Exception as e:  # what the command would have died of
            got.append(e)

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [data, data]
    kept = sorted(p.name for p in (cache_dir / "exports").iterdir())
    assert len(kept) == 2 and not any(name.startswith(".tmp-") for name in kept)  # no partial file left
    assert kept[1].endswith(".sqlite") and kept[0] == kept[1].removesuffix(".sqlite") + ".report.json"
