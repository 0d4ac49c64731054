"""How a Kineto trace's pieces become columns: in the reading process, in threads of it (the C reader,
`_kineto_fast`, lets go of the GIL while it reads a piece), or, where that reader is not built, in worker
processes that read them from slots of memory shared with it (analysis.readers.kineto merges them in file
order).

Threads read a piece where the stream holds it: nothing is copied, pickled or started but the threads. A
piece is copied once on its way to a worker process (into its slot); what comes back is its columns (numpy
arrays and the piece's names), pickled. Sending the text itself through the pool's pipe cost the reading
process a pickle and a write of every byte (0.8 s of 3.3 s of its CPU for a 419 MB trace).
"""

from __future__ import annotations

import gc
import mmap
import multiprocessing as mp
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress

from analysis.readers import kineto_stream
from analysis.readers.kineto_columns import Piece, _kineto_fast, columns, decode_columns, fast_piece
from analysis.readers.kineto_stream import Parsed, Stop, Text, TraceStream

IN_FLIGHT = 4  # pieces handed to workers and not yet merged: at most 16 MiB of JSON (2 each: as fast as 8)


FAST = _kineto_fast is not None  # pieces are read in threads; else, for big files, in worker processes


def start(workers: int) -> Pool | Threads | None:
    """Threads where the C reader is built, else worker processes, started now; None where processes
    cannot be had (the trace is then read in this thread)."""
    if FAST:
        return Threads(workers)
    try:
        pool = Pool(workers)
        pool.executor.submit(int).result()  # a fork pool starts all its processes on the first task
    except (OSError, ValueError, BrokenProcessPool):
        return None
    return pool


def pieces(stream: TraceStream, pool: Pool | Threads | None) -> Iterator[Piece]:
    """The stream's pieces as columns, in file order: decoded here, or by the pool's processes (from its
    shared slots: a piece is copied once on its way, not pickled and piped). A piece that does not
    decode is handed back to the stream, with all taken after it, and parsed there."""
    parts = iter(stream)
    pending: deque[tuple[Text | Parsed | Stop, Future[Piece | None] | Piece | None]] = deque()
    done = False
    sent = 0  # pieces sent to the pool: the next goes to slot sent % IN_FLIGHT
    while True:
        # a Stop (end of traceEvents, or an error) waits until every piece before it is settled.
        # At most IN_FLIGHT pieces pending: a slot is written again only after its piece is settled
        while (
            not done and len(pending) < (IN_FLIGHT if pool else 1) and not (pending and pending[-1][0].closes)
        ):
            part = next(parts, None)
            if part is None:
                done = True
            elif isinstance(part, Stop):
                pending.append((part, None))
            elif isinstance(part, Parsed):
                pending.append((part, columns(part.events)))
            elif pool is None:
                pending.append((part, text_columns(part)))
            else:
                pending.append((part, pool.submit(part, sent % IN_FLIGHT)))
                sent += 1
        if not pending:
            return
        part, result = pending.popleft()
        if isinstance(part, Stop):
            continue  # the stream ends the list or raises when asked for the next part
        piece = result.result() if isinstance(result, Future) else result
        if piece is None:
            for _, r in pending:
                if isinstance(r, Future):
                    r.cancel()  # one that runs reads a slot that may be written again: its result is dropped
            stream.rewind(b"".join(p.raw() for p in [part, *(p for p, _ in pending)]))
            pending.clear()
            done = False
            continue
        yield piece


def text_columns(text: Text) -> Piece | None:
    """The columns of a piece of the stream, read where it lies (the C reader; msgspec where that steps
    aside)."""
    if FAST:
        raw = _kineto_fast.columns(memoryview(text.buf)[text.start : text.end], True)
        if raw is not None:
            return fast_piece(raw)  # never DigitLimit: the C reader steps aside from such integers
    return decode_columns(text.data, fast=False)


class Threads:
    """Threads that turn pieces into columns where the stream holds them (a buffer is never changed, only
    replaced, so a piece in flight stays as it was cut)."""

    def __init__(self, workers: int) -> None:
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="kineto-piece")

    def submit(self, text: Text, slot: int) -> Future[Piece | None]:
        return self.executor.submit(text_columns, text)

    def close(self) -> None:
        self.executor.shutdown(cancel_futures=True)


_SLOTS: mmap.mmap | None = None  # in a worker: the pool's shared slots


def _attach(slots: mmap.mmap) -> None:
    """A worker's start: keep the slots (inherited through fork, not pickled); gc off as in build: the
    workers only make short-lived objects without cycles."""
    global _SLOTS
    _SLOTS = slots
    gc.disable()


def _decode_slot(start: int, size: int) -> Piece | None:
    """In a worker: the columns of the piece in the slot at `start`."""
    assert _SLOTS is not None
    return decode_columns(memoryview(_SLOTS)[start : start + size])


class Pool:
    """Worker processes and the shared memory they read pieces from: IN_FLIGHT slots of a piece's most
    bytes (an anonymous shared mapping, made before the fork: nothing to name or clean up after)."""

    def __init__(self, workers: int) -> None:
        self.slot = kineto_stream.CHUNK + 2  # a piece's most bytes: CHUNK and its brackets
        self.slots = mmap.mmap(-1, IN_FLIGHT * self.slot)
        # forked before the decompressing thread exists (a fork copies no thread), and without importing
        # the caller's main module again, as spawn would
        self.executor = ProcessPoolExecutor(
            workers, mp_context=mp.get_context("fork"), initializer=_attach, initargs=(self.slots,)
        )

    def submit(self, text: Text, slot: int) -> Future[Piece | None]:
        start = slot * self.slot
        text.write(memoryview(self.slots)[start : start + text.size])
        return self.executor.submit(_decode_slot, start, text.size)

    def close(self) -> None:
        self.executor.shutdown(cancel_futures=True)
        with suppress(BufferError):  # a piece of an error still points into it: freed with it
            self.slots.close()
