"""The C reader (analysis/readers/_kineto_fast.c) on the fuzzer's corpus (tests/kineto_corpus.py): on every
piece it gives the columns msgspec gives, or steps aside; it gives the same read from the list or from its
elements alone; and it never fails otherwise. `make asan` runs this file under AddressSanitizer and UBSan.

CORPUS_PIECES (default 5,000) sets the pieces of each of the CORPUS_PARTS parts of the long run (tests
marked `fuzz`: `make fuzz`, CI); `make test` reads a few hundred. The fixtures' own pieces are
tests/test_kineto_fast.py's."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from kineto_corpus import corpus
from test_kineto_fast import assert_same_piece

import analysis.readers.kineto_columns as columns
from analysis.readers.kineto_columns import Piece, decode_columns
from analysis.readers.kineto_events import event_of

pytestmark = [
    pytest.mark.attack,
    pytest.mark.skipif(columns._kineto_fast is None, reason="the C reader is not built here (no C compiler)"),
]
FAST = columns._kineto_fast
PIECES = int(os.environ.get("CORPUS_PIECES", "5000"))
PARTS = int(os.environ.get("CORPUS_PARTS", "4"))


def reference(data: bytes) -> Piece | None:
    """What the reader gives for a piece without the C reader: msgspec's columns, else (lone surrogates,
    which msgspec refuses even where it skips them) the columns of what the stdlib's parser reads; None
    where neither takes it."""
    slow = decode_columns(data, fast=False)
    if slow is not None:
        return slow
    try:
        values = json.loads(data, parse_float=str)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer past the digit limit
        return None
    return columns.columns([event_of(v) for v in values]) if type(values) is list else None


def outcome(read: Callable[[bytes], Piece | None], data: bytes) -> Piece | str | None:
    """A piece's columns, None (not taken), or the error it raised: nesting near the recursion limit can
    reach json.dumps of a name (the reader turns that into one line)."""
    try:
        return read(data)
    except RecursionError:
        return "RecursionError"


def check(data: bytes) -> bool:
    """Whether the C reader took the piece; where it did, that it gave what the reader gives without it."""
    raw = FAST.columns(data)
    if raw is None:
        return False
    fast, slow = outcome(decode_columns, data), outcome(reference, data)
    if isinstance(fast, Piece) and isinstance(slow, Piece):
        assert_same_piece(fast, slow)
    else:
        assert fast == slow, (fast, slow)
    if data[:1] == b"[" and data.rstrip()[-1:] == b"]":  # its elements alone, as a piece the stream holds
        body = data.strip()[1:-1]
        assert not body.strip() or FAST.columns(body, True) == raw
    return True


def run(seed: int, count: int) -> dict[str, Any]:
    taken = sum(check(data) for data in corpus(seed, count))
    return {"pieces": count, "taken": taken}


def test_the_corpus_reads_the_same() -> None:
    got = run(0, 300)
    assert got["taken"] > 30, got  # not only ever a step aside


@pytest.mark.slow
@pytest.mark.fuzz
@pytest.mark.parametrize("part", range(PARTS))
def test_the_long_corpus_reads_the_same(part: int) -> None:
    seed = int(os.environ.get("CORPUS_SEED", "1")) * 1000 + part
    run(seed, PIECES)
