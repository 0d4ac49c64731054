"""Build a large Nsight Systems export from a real one, for benchmarks/trace_speed.py.

The source's kernels, its CUDA runtime calls (all of them, or only the kernel launches), its memory
copies and sets, its OS runtime calls and its NVTX ranges are replicated until the export holds at least
`--kernels` kernels. Copy i is shifted in time past the end of copy i - 1 (by the span of every replicated
table) and gets fresh correlationIds, so `nsys stats` and the harness see a long run of the same program.
NVTX payloads (the harness numbers its `step` range and the phase ranges inside it by the step's index, in
int64Value) get + i * (the span of the replicated payloads), so each copy's steps keep numbers of their own
(the other sources of the corpus carry no payloads).

With `--within RANGE` only the rows inside the NVTX range RANGE (one, ended) are repeated, and the copies are
spliced in after it: the range and every row that ends after it are moved past the copies, and the capture's
end (ANALYSIS_DETAILS.duration) with them. From `--source ../shared/fixtures/nsys/h100-medium/report.sqlite
--within measured` (`harness run medium --nsys`: 5 warm-up and 10 measured steps with their forward, backward
and optimizer ranges, the measured ones in its `measured` range) that is one long run: warm-up steps 0-4,
then 10 measured steps a copy (1M kernels: 37 copies, steps 5-374), all in one `measured` range. Replicated
whole instead, each copy would bring its own warm-up steps (and `measured` range) into the middle of the run.
With `--shape-variants K`, copy i launches its kernels with gridX + (i % K) * 1000, so the export holds K
times the source's launch shapes (the default source, a PyTorch step with 33 shapes, gives 99 with K=3).
Everything happens inside SQLite (INSERT ... SELECT over a recursive CTE) in a copy in the output folder;
the source is only read.

    .venv/bin/python benchmarks/make_big_export.py OUT.sqlite [--kernels 1000000] [--shape-variants 3]
        [--source PATH] [--runtime all|launches] [--within RANGE]

Every replicated table grows with the kernels: from the default source, 2M kernels come with 12.1M runtime
calls and 3.6M NVTX ranges (1.7 GB, ~25 s here), 4M with 24.3M and 7.1M (3.4 GB, ~80 s).
`benchmarks/trace_speed.py --sizes 1,2,4` builds BIG and those two (big-2000000.sqlite,
big-4000000.sqlite) in its work folder and reuses them while their settings hold.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from analysis.readers.nsys_columns import KERNEL, MEMCPY, MEMSET, OSRT, RUNTIME
from analysis.readers.nsys_nvtx import NVTX, PUSHPOP_TYPES, STARTEND_TYPES

SHARED_NSYS = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys"
FIXTURE = SHARED_NSYS / "ext" / "dlprof_norelu" / "report.sqlite"  # PyTorch + DLProf, RTX 2070 SUPER
A100_FIXTURE = SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite"  # the 5-kernel saxpy of earlier runs

RANGE_TYPES = (*PUSHPOP_TYPES, *STARTEND_TYPES)  # NVTX ranges, not domain events
CORRELATED = (KERNEL, RUNTIME, MEMCPY, MEMSET)
PAYLOADS = ("int64Value", "uint64Value", "int32Value", "uint32Value")  # the payload columns nsys_nvtx reads


@dataclass
class Built:
    """What the export holds: rows per replicated table, launch shapes, size on disk."""

    path: Path
    copies: int
    rows: dict[str, int]
    shapes: int
    bytes: int

    @property
    def kernels(self) -> int:
        return self.rows.get(KERNEL, 0)

    def describe(self) -> str:
        short = {KERNEL: "kernels", RUNTIME: "runtime calls", MEMCPY: "memcpy", MEMSET: "memset",
                 NVTX: "NVTX ranges", OSRT: "OS runtime calls"}  # fmt: skip
        rows = ", ".join(f"{n:,} {short[t]}" for t, n in self.rows.items() if n)
        return f"{rows}; {self.shapes} kernel launch shapes; {self.bytes / 1e6:.0f} MB"


def rank_copy(source: Path, out: Path, rank: int) -> Path:
    """`source` copied to `out` as rank `rank`'s export: the same rows, its own bytes (SQLite's user_version
    set to rank + 1), since the multi-export commands refuse a byte-identical copy as one export twice."""
    shutil.copyfile(source, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    try:
        con.execute(f"PRAGMA user_version = {rank + 1}")
        con.commit()
    finally:
        con.close()
    return out


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in con.execute(f"PRAGMA table_info({table})")]


def make_big_export(
    out: Path,
    kernels: int = 1_000_000,
    source: Path = FIXTURE,
    shape_variants: int = 1,
    runtime: str = "all",
    within: str | None = None,
) -> Built:
    """Write the big export to `out` (replaced if there); say what it holds. `within`: the name of an NVTX
    range (the harness's `measured`) whose rows alone are repeated, spliced in after it (`--within`)."""
    if shape_variants < 1:
        raise ValueError("shape_variants must be at least 1")
    if not source.is_file():
        raise SystemExit(f"{source} not found: put the corpus at ../shared/fixtures, or pass --source")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    shutil.copyfile(source, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        present = [t for t in (KERNEL, RUNTIME, MEMCPY, MEMSET, NVTX, OSRT) if t in tables]
        if KERNEL not in present:
            raise SystemExit(f"{source} has no {KERNEL} table: pick a source with kernels")
        kind = {t: [] for t in present}  # the rows of a table that are replicated at all
        if NVTX in present:
            kind[NVTX].append(f"eventType IN ({', '.join(map(str, RANGE_TYPES))})")
        if runtime == "launches":  # only the launch calls of kernels: what gpukernsum/nvtxkernsum join on
            kind[RUNTIME].append(f"correlationId IN (SELECT correlationId FROM {KERNEL})")
        if within is None:
            where = kind
            # one copy spans every replicated row, so copies never overlap
            spans = [
                con.execute(
                    f"SELECT min(start), max(coalesce(end, start)) FROM {t}{_where(where[t])}"
                ).fetchone()
                for t in present
            ]
            lo = min(s[0] for s in spans if s[0] is not None)
            hi = max(s[1] for s in spans if s[1] is not None)
            span = hi - lo + 1_000_000
        else:
            lo, hi = _range_of(con, within, source)
            span = hi - lo  # the copies follow one another as the source's own steps do
            inside = "start >= :lo AND coalesce(end, start) < :hi"
            where = {t: [*c, inside] for t, c in kind.items()}
        payloads = [c for c in PAYLOADS if NVTX in present and c in _columns(con, NVTX)]
        window = _where(where.get(NVTX, []))
        step_of = [
            con.execute(f"SELECT min({c}), max({c}) FROM {NVTX}{window}", {"lo": lo, "hi": hi}).fetchone()
            for c in payloads
        ]
        steps = max((b - a + 1 for a, b in step_of if a is not None), default=0)
        (n_kern,) = con.execute(
            f"SELECT count(*) FROM {KERNEL}{_where(where[KERNEL])}", {"lo": lo, "hi": hi}
        ).fetchone()
        if not n_kern:
            raise SystemExit(
                f"{source} has no kernels to replicate{f' inside its `{within}` range' if within else ''}"
            )
        (total,) = con.execute(f"SELECT count(*) FROM {KERNEL}").fetchone()
        copies = 1 + max(math.ceil((kernels - total) / n_kern), 0)
        max_corr = max(
            con.execute(f"SELECT coalesce(max(correlationId), 0) FROM {t}").fetchone()[0]
            for t in present
            if t in CORRELATED
        )
        params = {
            "n": copies - 1, "span": span, "corr": max_corr + 1, "k": shape_variants, "steps": steps,
            "lo": lo, "hi": hi, "later": (copies - 1) * span,
        }  # fmt: skip
        cte = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < :n) "
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        if within is not None and copies > 1:  # what comes after the range moves past its copies
            for table in present:
                con.execute(f"UPDATE {table} SET end = end + :later WHERE end >= :hi", params)
                con.execute(f"UPDATE {table} SET start = start + :later WHERE start >= :hi", params)
        if within is not None and "duration" in _columns(con, "ANALYSIS_DETAILS"):
            # the capture's end (analysis.readers.nsys.capture_end) holds every copy
            con.execute("UPDATE ANALYSIS_DETAILS SET duration = duration + :later", params)
        for table in present:
            cols = _columns(con, table)
            shifted = {
                "start": "start + c.i * :span",
                "end": "end + c.i * :span",
                "correlationId": "correlationId + c.i * :corr",
                "gridX": "gridX + (c.i % :k) * 1000",
                **{c: f"{c} + c.i * :steps" for c in payloads},  # NULL stays NULL
            }
            if table not in CORRELATED:
                del shifted["correlationId"]
            if table != KERNEL:
                del shifted["gridX"]
            if table != NVTX:
                shifted = {k: v for k, v in shifted.items() if k not in payloads}
            select = ", ".join(f"{shifted.get(col, col)}" for col in cols)
            sql = f"{cte}INSERT INTO {table} ({', '.join(cols)}) SELECT {select} FROM {table}, c"
            sql += _where(where[table])
            con.execute(sql, {k: v for k, v in params.items() if f":{k}" in sql})
        con.commit()
        rows = {t: con.execute(f"SELECT count(*) FROM {t}{_where(kind[t])}").fetchone()[0] for t in present}
        (shapes,) = con.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT demangledName, gridX, gridY, gridZ, blockX, blockY, "
            f"blockZ FROM {KERNEL})"
        ).fetchone()
    finally:
        con.close()
    return Built(out, copies, rows, int(shapes), out.stat().st_size)


def _where(conditions: list[str]) -> str:
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


def _range_of(con: sqlite3.Connection, name: str, source: Path) -> tuple[int, int]:
    """The start and end of the NVTX range `name` (registered or not); there must be one."""
    named = "text = :name"
    if "StringIds" in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}:
        named += " OR textId IN (SELECT id FROM StringIds WHERE value = :name)"
    types = ", ".join(map(str, RANGE_TYPES))
    found = con.execute(
        f"SELECT start, end FROM {NVTX} WHERE eventType IN ({types}) AND ({named})", {"name": name}
    ).fetchall()
    if len(found) != 1 or found[0][1] is None:
        raise SystemExit(f"{source} has {len(found)} NVTX ranges named `{name}`: --within needs one, ended")
    return int(found[0][0]), int(found[0][1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--source", type=Path, default=FIXTURE, help=f"default: {FIXTURE}")
    parser.add_argument(
        "--shape-variants", type=int, default=3, help="copy i gets gridX + (i %% K) * 1000 (1: no change)"
    )
    parser.add_argument(
        "--runtime",
        choices=["all", "launches"],
        default="all",
        help="replicate every CUDA runtime call, or only the kernel launch calls",
    )
    parser.add_argument(
        "--within",
        metavar="RANGE",
        help="repeat only what lies inside the NVTX range RANGE (e.g. measured), spliced in after it",
    )
    args = parser.parse_args(argv)
    built = make_big_export(
        args.out, args.kernels, args.source, args.shape_variants, args.runtime, args.within
    )
    print(f"{args.out}: {built.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
