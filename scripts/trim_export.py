"""An nsys SQLite export made small enough for tests/data: a copy with the OS runtime, sampling, scheduling,
composite-event and environment tables emptied, vacuumed, compressed with xz -9 (tests/data/h100/README.md).
Kernels, CUDA API calls, NVTX, strings and the target's facts stay as nsys wrote them; the export given is
only read.

    python scripts/trim_export.py EXPORT.sqlite OUT.sqlite.xz
"""

from __future__ import annotations

import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

EMPTIED = (
    "OSRT_API",
    "OSRT_CALLCHAINS",
    "SAMPLING_CALLCHAINS",
    "COMPOSITE_EVENTS",
    "SCHED_EVENTS",
    "TARGET_INFO_SYSTEM_ENV",
)


def trim(export: Path, out: Path) -> dict[str, int]:
    """Write `export` trimmed and xz-compressed to `out`; return the rows removed per table emptied."""
    removed: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / export.name
        with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
        con = sqlite3.connect(copy)
        try:
            have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in EMPTIED:
                if table in have:
                    removed[table] = con.execute(f"DELETE FROM {table}").rowcount
            con.commit()
            con.execute("VACUUM")
        finally:
            con.close()
        with copy.open("rb") as f, lzma.open(out, "wb", preset=9) as packed:
            shutil.copyfileobj(f, packed)
    return removed


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].endswith(".xz"):
        print("usage: trim_export.py EXPORT.sqlite OUT.sqlite.xz", file=sys.stderr)
        return 2
    export, out = Path(argv[0]), Path(argv[1])
    if not export.is_file():
        print(f"no such export: {export}", file=sys.stderr)
        return 1
    try:
        removed = trim(export, out)
    except sqlite3.DatabaseError as e:
        print(f"{export}: not an SQLite export ({e})", file=sys.stderr)
        return 1
    rows = ", ".join(f"{t} {n:,}" for t, n in removed.items()) or "nothing to empty"
    print(f"{out}: {out.stat().st_size:,} bytes (rows removed: {rows})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
