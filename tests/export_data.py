"""Exports derived from the real fixtures, for the analysis tests: a copy of a fixture changed by SQL.

Each builder copies the fixture into a test's tmp_path and runs SQL on the copy; the fixture is only read.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

A100_TID = 302119224788637  # the launching (main) thread of the A100 fixture
A100_OTHER_TID = A100_TID + 1  # a second thread of the same process (pid 1230493)


def query_rows(path: Path, query: str) -> list[tuple]:
    """The rows of `query` on the SQLite file at `path`, opened read-only."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


_COPIES = iter(range(1, 1 << 30))


def distinct_copy(src: Path, dst: Path) -> Path:
    """`src` copied to `dst` with its rows unchanged but its bytes its own (SQLite's user_version in the
    header set to a number no other copy has): a stand-in for another rank's export, which the multi-export
    commands would refuse as a copy of `src` were it the same bytes."""
    if src.resolve() != dst.resolve():  # `dst` itself: its own bytes in place
        shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    try:
        con.execute(f"PRAGMA user_version = {next(_COPIES)}")
        con.commit()
    finally:
        con.close()
    return dst


def commit_without_checkpoint(export: Path) -> None:
    """Double the kernel rows of a WAL-mode export in another process that commits into the log and dies
    before a checkpoint: the change is in `export`'s -wal file only."""
    code = (
        "import os, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1]); db.execute('PRAGMA wal_autocheckpoint=0')\n"
        "db.execute('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL')\n"
        "db.commit(); os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(export)], check=True)
    assert export.with_name(export.name + "-wal").stat().st_size > 0


def derive(src: Path, dst: Path, *statements: str) -> Path:
    """Copy `src` to `dst` and run `statements` on the copy."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    try:
        for sql in statements:
            con.execute(sql)
        con.commit()
    finally:
        con.close()
    return dst


def newer_schema(src: Path, dst: Path) -> Path:
    """What schema 3.x exports look like: META_DATA_EXPORT, a greenContextId column, no empty tables,
    no mangledName column (older 2.x exports lack it too)."""
    con = sqlite3.connect(src)
    empty = [
        name
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if name not in ("StringIds", "EXPORT_META_DATA")
        and con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] == 0
    ]
    con.close()
    kernel_cols = "start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, " \
        "shortName, gridX, gridY, gridZ, blockX, blockY, blockZ"  # fmt: skip
    statements = [
        "ALTER TABLE EXPORT_META_DATA RENAME TO META_DATA_EXPORT",
        "UPDATE META_DATA_EXPORT SET value = '3.11.0' WHERE name = 'EXPORT_SCHEMA_VERSION'",
        *(f'DROP TABLE "{name}"' for name in empty),
    ]
    has_kernels = (
        sqlite3.connect(src)
        .execute("SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'")
        .fetchone()[0]
    )
    if has_kernels:
        statements += [
            f"CREATE TABLE k2 AS SELECT {kernel_cols}, 0 AS greenContextId FROM CUPTI_ACTIVITY_KIND_KERNEL",
            "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
            "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL",
        ]
    return derive(src, dst, *statements)


def launches_on_second_thread(src: Path, dst: Path) -> Path:
    """The A100 fixture with its kernel launch calls made on another thread of the same process, as
    PyTorch's autograd thread launches the backward pass."""
    return derive(
        src,
        dst,
        f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = {A100_OTHER_TID} WHERE correlationId IN "
        "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    )


def with_harness_ranges(src: Path, dst: Path, payload: bool = True) -> Path:
    """The A100 fixture with harness ranges: each `saxpy` range becomes `forward` inside a `step` (payload
    = step index), the memcpy after it inside `backward`; a `measured` range covers steps 1..4."""
    con = sqlite3.connect(src)
    saxpy = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'saxpy' ORDER BY start").fetchall()
    con.close()
    rows = []
    for i, (start, end) in enumerate(saxpy):
        step_end = end + 60_000_000
        pay = i if payload else "NULL"
        rows.append((start - 1000, step_end, "step", pay))
        rows.append((start, end, "forward", pay))
        rows.append((end + 1, step_end - 1, "backward", pay))
    measured = (saxpy[1][0] - 2000, saxpy[-1][1] + 60_000_000 + 1000, "measured", "NULL")
    values = ", ".join(
        f"({s}, {e}, 59, '{name}', {A100_TID}, 0, {pay})" for s, e, name, pay in [*rows, measured]
    )
    return derive(
        src,
        dst,
        "DELETE FROM NVTX_EVENTS WHERE text = 'saxpy'",
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, int64Value) "
        f"VALUES {values}",
    )


def as_printed(df):  # type: ignore[no-untyped-def]
    """`df` as its CSV reads back, to compare cell by cell with an `nsys stats` CSV."""
    import io

    import pandas as pd

    return pd.read_csv(io.StringIO(df.to_csv(index=False)))


def oracle(folder: Path, report: str):  # type: ignore[no-untyped-def]
    import pandas as pd

    return pd.read_csv(folder / f"{report}.csv")


H100_STEP_END = (
    "SELECT e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
    "WHERE s.value = 'step' AND e.int64Value = {step}"
)


def broken_captures(src: Path, folder: Path) -> dict[str, Path]:
    """h100-medium broken as real GPUs break captures, one copy each: `kernels-cut` (the trace of kernels
    stops after the first measured step, 5: PyTorch #192021, tritonbench #468), `nvtx-cut` (NVTX stops after
    step 2 while CUDA goes on, as nsys 2022.4 did with a CUDA 13 program), `unknown` (every kernel named
    `[Unknown]`, as nsys 2023.4 named 72% of this one's GPU time)."""
    folder.mkdir(parents=True, exist_ok=True)
    unknown = "(SELECT id FROM StringIds WHERE value = '[Unknown]')"
    return {
        "kernels-cut": derive(
            src,
            folder / "kernels-cut.sqlite",
            f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start > ({H100_STEP_END.format(step=5)})",
        ),
        "nvtx-cut": derive(
            src,
            folder / "nvtx-cut.sqlite",
            f"DELETE FROM NVTX_EVENTS WHERE start > ({H100_STEP_END.format(step=2)})",
        ),
        "unknown": derive(
            src,
            folder / "unknown.sqlite",
            f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = {unknown}, shortName = {unknown}",
        ),
    }
