"""The C reader's corpus: pieces of traceEvents (JSON lists of events) as the fuzzer makes them, for
tests/test_kineto_corpus.py (the C reader and msgspec give the same columns on each, or the C reader steps
aside) and `make asan` (the same under AddressSanitizer and UBSan).

Each seed gives the same pieces: windows of the fuzzer's Kineto fixtures' events, mutated by the fuzzer's own
mutations (tests/test_fuzz.py: wrong types, missing keys, hostile names, and its hostile shapes: long
values, deep nesting, long integers, many distinct shapes, colliding names, threads named by numbers),
written with one of several separators, ASCII-only or not, and some cut short, with a byte changed or with
invalid UTF-8 (the fixtures' own pieces, as the stream cuts them, are tests/test_kineto_fast.py's).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from functools import cache
from typing import Any

from kineto_data import trace_path
from test_fuzz import ARG_KEYS, HOSTILE, KEYS, dumps, mutate_trace

SHAPES = [
    ("long", 1000), ("long", 70_000), ("deep", 2), ("deep", 63), ("deep", 64), ("deep", 65), ("deep", 300),
    ("deep", 1000), ("digits", 18), ("digits", 19), ("digits", 20), ("digits", 400), ("digits", 4301),
    ("float digits", 17), ("float digits", 400), ("shapes", 300), ("colliding", 300), ("thread name", "1.5"),
    ("thread name", "40"), ("thread name", "-0"), ("thread name", "1e3"), ("thread name", "7" * 25),
    ("thread name", "true"),
]  # fmt: skip
FIXTURES = ("nccl", "alexnet")  # the fuzzer's (tests/test_fuzz.py)
MUTATIONS = ["set", "delete", "arg", "shuffle_ts", "dup", "hostile"]
SEPARATORS = [", ", ",", ",\n  ", " ,\t"]
ODD_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\\", b'"', b"}", b"]", b"{", b"\\u12"]


@cache
def fixture_events(fixture: str) -> list[Any]:
    with gzip.open(trace_path(fixture), "rt") as f:
        return json.load(f)["traceEvents"]


def wrong_value(rng: random.Random) -> Any:
    """A value of the wrong type or size (tests/test_fuzz.py's WRONG, drawn by `rng`)."""
    return rng.choice(
        [
            None, True, False, rng.randint(-(2**70), 2**70), rng.randint(-3, 2**33),
            rng.random() * 10 ** rng.randint(0, 20), float("nan"), float("inf"),
            "".join(rng.choice("ab\\\"}{ é中\x01") for _ in range(rng.randint(0, 8))),
            [rng.randint(-2, 9) for _ in range(rng.randint(0, 4))], {"a": rng.randint(0, 3)},
            rng.choice(HOSTILE),
        ]
    )  # fmt: skip


def mutations(rng: random.Random, n: int) -> list[tuple]:
    """Mutations as tests/test_fuzz.py's kineto_mutations draws them (without `top`: a piece is a list)."""
    out = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(MUTATIONS)
        value = rng.choice(SHAPES) if kind == "hostile" else wrong_value(rng)
        out.append((kind, rng.randrange(n), rng.choice(KEYS), rng.choice(ARG_KEYS), value))
    return out


def mutated_piece(rng: random.Random) -> bytes:
    events = fixture_events(rng.choice(FIXTURES))
    start = rng.randrange(len(events))
    window = events[start : start + rng.randint(1, 60)]
    doc = mutate_trace({"traceEvents": window}, mutations(rng, len(window)))
    items = doc["traceEvents"] if isinstance(doc, dict) and isinstance(doc["traceEvents"], list) else window
    ascii_only = rng.random() < 0.5
    text = "[" + rng.choice(SEPARATORS).join(dumps(e, ascii_only) for e in items) + "]"
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate written raw: invalid UTF-8
    odd = rng.random()
    if odd < 0.05:  # cut short
        data = data[: rng.randrange(len(data))]
    elif odd < 0.1:  # one byte changed, or one put in
        at = rng.randrange(len(data))
        data = data[:at] + rng.choice(ODD_BYTES) + data[at + (odd < 0.075) :]
    return data


def corpus(seed: int, count: int) -> Iterator[bytes]:
    """`count` mutated pieces, the same for the same seed."""
    rng = random.Random(seed)
    for _ in range(count):
        yield mutated_piece(rng)
