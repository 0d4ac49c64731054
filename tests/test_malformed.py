"""Exports with values that cannot be right: left out and counted in one note, or one clear error line;
never a traceback and never a wrong total."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_data import derive
from typer.testing import CliRunner

from analysis.errors import ExportError
from analysis.readers import NULL
from analysis.readers.nsys_open import open_nsys
from analysis.tables.kernels import kernel_summary
from analysis.tables.launch import launch_summary
from analysis.trace.opening import open_trace
from harness.cli import app

pytestmark = pytest.mark.attack  # scripts/attack.sh runs and counts these

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
FIRST = 140  # correlationId of the first saxpy launch: 17,704,808 ns
TOTAL = 88_573_480


def one_kernel_changed(src: Path, dst: Path, assignment: str) -> Path:
    """The fixture with one kernel row changed, in a copy of the table without NOT NULL constraints."""
    return derive(
        src,
        dst,
        f"CREATE TABLE k2 AS SELECT * FROM {KERNELS}",
        f"DROP TABLE {KERNELS}",
        f"ALTER TABLE k2 RENAME TO {KERNELS}",
        f"UPDATE {KERNELS} SET {assignment} WHERE correlationId = {FIRST}",
    )


@pytest.mark.parametrize(
    "assignment",
    [
        "start = 1.5",
        "start = 'soon'",
        "end = 'later'",
        "start = x'00'",
        "end = end + 0.5",
        "start = NULL",
        "end = NULL",
        "end = start - 10",
    ],
    ids=["real", "text", "text-end", "blob", "real-end", "null-start", "null-end", "end-before-start"],
)
def test_bad_kernel_rows_are_left_out_and_counted(a100_export: Path, tmp_path: Path, assignment: str) -> None:
    bad = one_kernel_changed(a100_export, tmp_path / "bad.sqlite", assignment)
    table = kernel_summary(open_trace(bad, cache=False))
    assert table["Instances"].tolist() == [4]
    assert table["Total Time (ns)"].tolist() == [TOTAL - 17_704_808]
    assert table["Min (ns)"].min() > 0
    note = "left out 1 of 5 kernels that cannot be right (no start or end, or an end before the start)"
    assert table.attrs["notes"] == [note]
    launch = launch_summary(open_trace(bad, cache=False))
    assert launch["Count"].tolist() == [4]


def test_times_declared_as_text_are_not_durations(a100_export: Path, tmp_path: Path) -> None:
    """Columns of TEXT affinity keep numbers as text and compare them as text: no kernel has a duration
    (the comparisons the durations are read with on INTEGER columns would take '9' > '10')."""
    bad = derive(
        a100_export,
        tmp_path / "bad.sqlite",
        "CREATE TABLE k2 (start TEXT, end TEXT, demangledName INTEGER, gridX, gridY, gridZ, blockX, blockY, "
        "blockZ, correlationId, globalPid, deviceId, streamId, shortName, contextId)",
        f"INSERT INTO k2 SELECT start, end, demangledName, gridX, gridY, gridZ, blockX, blockY, blockZ, "
        f"correlationId, globalPid, deviceId, streamId, shortName, contextId FROM {KERNELS}",
        f"DROP TABLE {KERNELS}",
        f"ALTER TABLE k2 RENAME TO {KERNELS}",
    )
    reader = open_nsys(bad)
    try:
        assert reader.read("kernels", ["duration"])["duration"].tolist() == [NULL] * 5
    finally:
        reader.close()


def test_the_cli_prints_the_note_not_a_traceback(a100_export: Path, tmp_path: Path) -> None:
    bad = one_kernel_changed(a100_export, tmp_path / "bad.sqlite", "start = 'soon'")
    result = CliRunner().invoke(app, ["kernels", str(bad), "--no-cache"])
    assert result.exit_code == 0
    assert "Traceback" not in result.output and "left out 1 of 5 kernels" in result.output


def test_unknown_name_id_is_left_out(a100_export: Path, tmp_path: Path) -> None:
    bad = one_kernel_changed(a100_export, tmp_path / "bad.sqlite", "demangledName = 987654321")
    table = kernel_summary(open_trace(bad, cache=False))
    assert table["Instances"].tolist() == [4] and table["Name"].iloc[0].startswith("saxpy")
    assert any("name is not in the export's string table" in n for n in table.attrs["notes"])


def test_missing_string_table_is_one_clear_error(a100_export: Path, tmp_path: Path) -> None:
    bad = derive(a100_export, tmp_path / "bad.sqlite", "DROP TABLE StringIds")
    with pytest.raises(ExportError, match=r"has no string table \(StringIds\).*export it again"):
        kernel_summary(open_trace(bad, cache=False))
    result = CliRunner().invoke(app, ["kernels", str(bad)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1


def test_flipped_page_in_the_kernel_table(a100_export: Path, tmp_path: Path) -> None:
    """Damage the page holding the kernel rows (its second half, where SQLite keeps the cells): SQLite
    finds the page malformed, and the command stops with one line saying so, no table and no traceback."""
    import sqlite3

    con = sqlite3.connect(f"file:{a100_export}?mode=ro", uri=True)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (KERNELS,)).fetchone()[0]
    con.close()
    data = bytearray(a100_export.read_bytes())
    off = (root - 1) * page_size
    for i in range(off + page_size // 2, off + page_size):
        data[i] ^= 0xFF
    bad = tmp_path / "flipped.sqlite"
    bad.write_bytes(bytes(data))
    before = bad.read_bytes()
    result = CliRunner().invoke(app, ["kernels", str(bad), "--no-cache", "--format", "csv"])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"error: {bad} is corrupt or truncated (database disk image is malformed): export it again from the"
        " .nsys-rep\n"
    )
    assert bad.read_bytes() == before


def test_a_text_id_that_is_not_an_integer_reads_as_none(cpu_export: Path, tmp_path: Path) -> None:
    """The NVTX ids are read as int32: a REAL textId (the chunk is read again strictly) is no id, not the
    NULL sentinel cut to 32 bits (which named it StringIds 1, "[kernel.kallsyms]"); the others keep their
    names."""
    whole = open_trace(cpu_export, cache=False).frame("nvtx", ["range_id", "name"])
    first = int(whole["range_id"].iloc[0])
    bad = derive(
        cpu_export,
        tmp_path / "bad.sqlite",
        "CREATE TABLE n2 AS SELECT * FROM NVTX_EVENTS",
        "DROP TABLE NVTX_EVENTS",
        "ALTER TABLE n2 RENAME TO NVTX_EVENTS",
        f"UPDATE NVTX_EVENTS SET textId = 2.5 WHERE rowid = {first}",
    )
    names = open_trace(bad, cache=False).frame("nvtx", ["range_id", "name"])
    assert names["range_id"].tolist() == whole["range_id"].tolist()
    assert names["name"].iloc[1:].tolist() == whole["name"].iloc[1:].tolist()
    assert whole["name"].iloc[0] == "step" and names["name"].iloc[0] == ""  # no text of its own: no name


def test_a_string_that_is_not_utf8_reads_replaced(cpu_export: Path, tmp_path: Path) -> None:
    """nsys keeps what the program printed in StringIds as it came (ProcessStreams): bytes that are not
    UTF-8 read as U+FFFD, and the export is read, not called corrupt."""
    bad = derive(
        cpu_export,
        tmp_path / "bad.sqlite",
        "INSERT INTO StringIds VALUES (999999, CAST(x'ff41fe0a' AS TEXT))",
    )
    for command in ("health", "osrt"):
        result = CliRunner().invoke(app, [command, str(bad), "--no-cache", "--format", "csv"])
        assert result.exit_code == 0, result.output
        assert "corrupt" not in result.stderr and result.stdout.count("\n") > 1
    reader = open_nsys(bad)
    try:
        with reader.engine.connect() as conn:
            value = conn.exec_driver_sql("SELECT value FROM StringIds WHERE id = 999999").scalar()
    finally:
        reader.close()
    assert value == "\ufffdA\ufffd\n"
