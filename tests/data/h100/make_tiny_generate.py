"""Build tiny-generate.sqlite.xz: a generate run's export made from the real training capture
tiny-cupti13.sqlite.xz (nsys 2023.4, CUPTI 13.0, an H100), by rewriting its NVTX ranges and a few launch
calls in SQL. Kernels, their times, names and correlationIds and every other table stay as nsys wrote them.

    .venv/bin/python tests/data/h100/make_tiny_generate.py

What changes, per `step` range (7 steps, the last 5 inside `measured`):
- `forward` is renamed `prefill`;
- `backward` and `optimizer` become one `decode` range (backward's start to optimizer's end), split into
  TOKENS `token` ranges (payload 1, 2, …: the token's index), each boundary between two launch calls;
- the calls of autograd's thread are moved onto the main thread (a generate run launches everything from
  it), so each token range holds its kernels' launch calls as a real decode does;
- in the last step's decode, each token is made a CUDA-graph replay as nsys records one traced per node
  (`--cuda-graph-trace=node`): its kernels take the correlationId of one `cudaGraphLaunch_v10000` call
  (the token's first launch call, renamed) and a graphNodeId each (graph << 32 | node); the token's other
  launch calls are deleted.
"""

from __future__ import annotations

import itertools
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE / "tiny-cupti13.sqlite.xz"
TARGET = HERE / "tiny-generate.sqlite.xz"
TOKENS = 4  # token ranges per step's decode
GRAPH_LAUNCH = "cudaGraphLaunch_v10000"


def names(db: sqlite3.Connection) -> dict[str, int]:
    return {v: i for i, v in db.execute("SELECT id, value FROM StringIds")}


def string_id(db: sqlite3.Connection, value: str) -> int:
    found = names(db).get(value)
    if found is not None:
        return found
    new = db.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (new, value))
    return new


def launch_calls(db: sqlite3.Connection, tid: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(start, end, correlationId) of the calls on `tid` inside [lo, hi] that launched a kernel."""
    return db.execute(
        "SELECT r.start, r.end, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.globalTid = ? "
        "AND r.start >= ? AND r.end <= ? AND EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE "
        "k.correlationId = r.correlationId) ORDER BY r.start",
        (tid, lo, hi),
    ).fetchall()


def token_spans(calls: list[tuple[int, int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """TOKENS spans covering [lo, hi], each boundary in the gap between two launch calls."""
    cuts = [lo + 1]
    for i in range(1, TOKENS):
        at = round(i * len(calls) / TOKENS)
        before, after = calls[at - 1], calls[at]
        if before[1] >= after[0]:
            raise SystemExit(f"launch calls overlap at {after[0]}: no boundary between them")
        cuts.append((before[1] + after[0]) // 2)
    cuts.append(hi - 1)
    return [(a + (i > 0), b) for i, (a, b) in enumerate(itertools.pairwise(cuts))]


def build(path: Path) -> None:
    db = sqlite3.connect(path)
    ids = names(db)
    step, fwd, bwd, opt = (ids[n] for n in ("step", "forward", "backward", "optimizer"))
    prefill, decode, token = (string_id(db, n) for n in ("prefill", "decode", "token"))
    cols = [r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")]
    rows = [dict(zip(cols, r, strict=True)) for r in db.execute("SELECT * FROM NVTX_EVENTS ORDER BY start")]
    main = next(r["globalTid"] for r in rows if r["textId"] == step)
    process = main & ~0xFFFFFF
    db.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = ? WHERE globalTid != ? AND (globalTid & ?) = ?",
        (main, main, ~0xFFFFFF, process),
    )
    graph_launch = string_id(db, GRAPH_LAUNCH)
    out = []
    steps = [r for r in rows if r["textId"] == step]
    for r in rows:
        if r["textId"] in (opt, bwd):
            continue
        if r["textId"] == fwd:
            r = {**r, "textId": prefill}
        out.append(r)
    for n, s in enumerate(steps):
        inside = [r for r in rows if r["end"] and s["start"] <= r["start"] <= r["end"] <= s["end"]]
        b = next(r for r in inside if r["textId"] == bwd)
        o = next(r for r in inside if r["textId"] == opt)
        out.append({**b, "textId": decode, "end": o["end"]})
        calls = launch_calls(db, main, b["start"], o["end"])
        spans = token_spans(calls, b["start"], o["end"])
        for k, (lo, hi) in enumerate(spans, start=1):
            out.append({**b, "textId": token, "start": lo, "end": hi, "int64Value": k})
            if n == len(steps) - 1:
                replay(db, launch_calls(db, main, lo, hi), graph_launch, graph=k)
    db.execute("DELETE FROM NVTX_EVENTS")
    for r in sorted(out, key=lambda r: (r["end"] is None, r["start"], -(r["end"] or 0))):
        db.execute(
            f"INSERT INTO NVTX_EVENTS ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [r[c] for c in cols],
        )
    db.commit()
    db.execute("VACUUM")
    db.close()


def replay(db: sqlite3.Connection, calls: list[tuple[int, int, int]], launch: int, graph: int) -> None:
    """The kernels of `calls` as one graph replay launched by the first call."""
    first = calls[0][2]
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE correlationId = ?", (launch, first))
    node = 0
    for _, _, corr in calls:
        for (rowid,) in db.execute(
            "SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = ? ORDER BY start", (corr,)
        ).fetchall():
            db.execute(
                "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = ?, graphNodeId = ? WHERE rowid = ?",
                (first, (graph << 32) | node, rowid),
            )
            node += 1
        if corr != first:
            db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?", (corr,))


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "tiny-generate.sqlite"
        with lzma.open(SOURCE) as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        build(path)
        with path.open("rb") as src, lzma.open(TARGET, "wb", preset=9) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {TARGET} ({TARGET.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
