"""Build a large Nsight Systems export from the real A100 fixture, for benchmarks/export_speed.py.

The fixture's kernels, their launch calls (both runtime rows of each, as recorded) and its `saxpy` NVTX
ranges are replicated N times, each copy shifted past the end of the previous one and given fresh
correlationIds, so `nsys stats` and the harness see a long run of the same program. Everything happens
inside SQLite (INSERT ... SELECT over a recursive CTE), in a copy in the output folder; the fixture is
only read.

    .venv/bin/python benchmarks/make_big_export.py OUT.sqlite [--kernels 1000000]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import sys
from pathlib import Path

FIXTURE = (
    Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys" / "a100-saxpy-mpi" / "report.sqlite"
)


def make_big_export(out: Path, kernels: int = 1_000_000, source: Path = FIXTURE) -> int:
    """Write the big export to `out`; return how many kernels it holds."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    try:
        (n_kern,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        copies = math.ceil(kernels / n_kern)
        lo, hi = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        (max_corr,) = con.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        span = hi - lo + 1_000_000
        params = {"n": copies - 1, "span": span, "corr": max_corr + 1}
        cte = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < :n) "
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        for table, corr in (
            ("CUPTI_ACTIVITY_KIND_KERNEL", True),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", True),
        ):
            cols = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            select = ", ".join(
                "start + c.i * :span" if col == "start"
                else "end + c.i * :span" if col == "end"
                else "correlationId + c.i * :corr" if col == "correlationId" and corr
                else col
                for col in cols
            )  # fmt: skip
            where = ""
            if table == "CUPTI_ACTIVITY_KIND_RUNTIME":
                # only the launch calls of kernels: what gpukernsum/nvtxkernsum join on
                where = " WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
            con.execute(
                f"{cte}INSERT INTO {table} ({', '.join(cols)}) SELECT {select} FROM {table}, c{where}",
                params,
            )
        cols = [row[1] for row in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        select = ", ".join(
            "start + c.i * :span" if col == "start" else "end + c.i * :span" if col == "end" else col
            for col in cols
        )
        con.execute(
            f"{cte}INSERT INTO NVTX_EVENTS ({', '.join(cols)}) SELECT {select} FROM NVTX_EVENTS, c "
            "WHERE text = 'saxpy'",
            {k: v for k, v in params.items() if k != "corr"},
        )
        con.commit()
        (total,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        con.close()
    return int(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    total = make_big_export(args.out, args.kernels)
    print(f"{args.out}: {total:,} kernels, {args.out.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
