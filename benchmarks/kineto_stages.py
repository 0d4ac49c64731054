"""Where the Kineto reader's time goes: each stage of reading one trace, timed in CPU seconds in one process
(no workers); each run is one stage more than the run it builds on, so a stage costs the difference:

    decompress   python-isal in its thread, the bytes thrown away
    cut          decompress + TraceStream cutting traceEvents into ~4 MiB pieces at element boundaries
    scan         cut + msgspec validating each piece as a list of raw elements (what any JSON reader must
                   at least do: the tokenizer's floor)
    orjson       cut + orjson.loads of each piece instead (a plain parse into dicts and lists: the reference)
    decode       cut + msgspec decoding each piece into the reader's event structs (kineto_events.decode)
    columns      decode + the pieces' columns (kineto_columns.columns: events to their groups, numpy
                   arrays): the reader where the C reader is not built, or steps aside
    c            cut + the C reader (analysis/readers/_kineto_fast.c) reading each piece into raw columns
    c-piece      c + those columns as the reader's pieces (kineto_columns.fast_piece: names to ids)
    whole        open_kineto(TRACE, workers=1): c-piece, the merge of the pieces and the frames

    .venv/bin/python benchmarks/kineto_stages.py /work/bench-data/kineto-280mb/trace.json.gz --repeat 3

Prints the minimum and the median CPU of each over the repeats (the machine's 2 cores are shared: the
minimum is the least disturbed), and the load average.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import orjson
from isal import igzip_threaded

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.readers.kineto import open_kineto
from analysis.readers.kineto_columns import _kineto_fast, columns, decode_columns
from analysis.readers.kineto_events import decode
from analysis.readers.kineto_stream import Text, TraceStream

RAW = msgspec.json.Decoder(list[msgspec.Raw])
BASE = {"cut": "decompress", "scan": "cut", "orjson": "cut", "decode": "cut", "columns": "decode", "c": "cut",
        "c-piece": "c", "whole": "c-piece"}  # fmt: skip


def stages(path: Path) -> dict[str, Callable[[], object]]:
    def pieces(work: Callable[[bytes], object]) -> Callable[[], None]:
        def run() -> None:
            with igzip_threaded.open(path, "rb", threads=1) as f:
                for p in TraceStream(path, f.read):
                    if isinstance(p, Text):
                        work(p.data)

        return run

    def decompress() -> None:
        with igzip_threaded.open(path, "rb", threads=1) as f:
            while f.read(1 << 22):
                pass

    return {
        "decompress": decompress,
        "cut": pieces(lambda d: None),
        "scan": pieces(RAW.decode),
        "orjson": pieces(orjson.loads),
        "decode": pieces(decode),
        "columns": pieces(lambda d: columns(decode(d))),  # type: ignore[arg-type]
        "c": pieces(_kineto_fast.columns),
        "c-piece": pieces(decode_columns),
        "whole": lambda: open_kineto(path, workers=1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    size = 0
    with igzip_threaded.open(args.trace, "rb", threads=1) as f:
        while data := f.read(1 << 22):
            size += len(data)
    gc.disable()  # as the reader runs
    cpu: dict[str, list[float]] = {}
    loads = []
    for _ in range(args.repeat):
        for name, run in stages(args.trace).items():
            loads.append(os.getloadavg()[0])
            start = time.process_time()
            run()
            cpu.setdefault(name, []).append(time.process_time() - start)
    print(f"{args.trace}: {size / 1e6:,.0f} MB of JSON; load average {min(loads):.1f}–{max(loads):.1f}")
    print("| stage | CPU min / median (s) | min − the stage before | MB/s of CPU (min) |")
    print("|---|---|---|---|")
    for name, times in cpu.items():
        low = min(times)
        extra = low - min(cpu[BASE[name]]) if name in BASE else low
        print(
            f"| {name} | {low:.2f} / {statistics.median(times):.2f} | {extra:+.2f} | {size / 1e6 / low:.0f} |"
        )


if __name__ == "__main__":
    main()
