"""The fields of a record read from outside (a run's file, a row edited by hand), each checked as `harness
run` writes it: a whole number in its range, a duration, a finite figure, text, one of some words, a run id,
an object with the fields of a record. A field that fails is a `Damaged` naming it and saying why."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

from harness.core.bounds import INT64_MAX, hidden

MAX_NS = 2**62  # a time past this is no measurement (analysis.trace.frames.MAX_TIME)
ID_BYTES = 255


class Damaged(ValueError):
    """A field that `harness run` would not have written: the message names it and says why."""


class NotJson(str):
    """What a JSON column of the results database holds where it holds no JSON (a row edited by hand), kept
    as it is so that the row's check names it (harness.store.schema.StoredJSON)."""


def fail(where: str, why: str) -> Damaged:
    return Damaged(f"{where} {why}")


def whole(value: Any, where: str, low: int = 0, high: int = INT64_MAX) -> int:
    if type(value) is not int:
        raise fail(where, f"is {value!r}, not a whole number")
    if not low <= value <= high:
        raise fail(where, f"is {value}, outside {low}..{high}")
    return value


def duration(value: Any, where: str) -> int:
    return whole(value, where, 0, MAX_NS)


def figure(value: Any, where: str, *, negative: bool = False) -> float | int | None:
    """None or a finite number (not below 0 unless `negative`)."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or abs(value) > 1e30:
        raise fail(where, f"is {value!r}, not a finite number")
    if value < 0 and not negative:
        raise fail(where, f"is {value}, below 0")
    return value


def text(
    value: Any,
    where: str,
    *,
    optional: bool = False,
    plain: bool = False,
    quoted: bool = False,
    column: bool = False,
) -> str | None:
    """A string (None where `optional`); `plain`: without control or format characters; `quoted`: any
    characters, NUL too (an error quoting what a program printed); `column`: stored as it is in a text
    column, which holds UTF-8 alone (a lone surrogate, `\\ud800` in JSON, cannot be written there)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise fail(where, f"is {value!r}, not text")
    if ("\x00" in value and not quoted) or (plain and hidden(value)):
        raise fail(where, f"is {value!r}: it holds control characters")
    if column and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value if len(value) <= 60 else f"{value[:60]}…"
            raise fail(where, f"is {shown!r}: it holds a lone surrogate, not UTF-8 text") from None
    return value


def one_of(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise fail(where, f"is {value!r}, not one of {', '.join(allowed)}")
    return value


def run_id(value: Any, where: str = "run_id", *, optional: bool = False) -> str | None:
    """A name: not empty, no folder separator, no control characters, at most ID_BYTES bytes."""
    if value is None and optional:
        return None
    name = text(value, where, plain=True)
    assert name is not None
    if not name.strip() or name in (".", ".."):
        raise fail(where, "is empty")
    if "/" in name or "\\" in name:
        raise fail(where, f"is {name!r}: it holds a folder separator")
    if len(name.encode("utf-8", "surrogatepass")) > ID_BYTES:
        raise fail(where, f"is longer than {ID_BYTES} bytes")
    return name


def mapping(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, NotJson):
        shown = value if len(value) <= 40 else f"{value[:40]}…"
        raise fail(where, f"is {shown!r}, not JSON")
    if not isinstance(value, dict):
        raise fail(where, f"is {type(value).__name__}, not an object")
    return value


def objects(value: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """A list of objects, each with where it is (`where[i]`)."""
    if not isinstance(value, list):
        raise fail(where, f"is {type(value).__name__}, not a list")
    return [(f"{where}[{i}]", mapping(row, f"{where}[{i}]")) for i, row in enumerate(value)]


def only(value: dict[str, Any], allowed: Iterable[str], where: str) -> None:
    """No field but those of `allowed`: one the harness does not write is refused, never stored unread."""
    unknown = sorted(set(value) - set(allowed), key=str)
    if unknown:
        raise fail(where, f"holds fields the harness does not write: {', '.join(map(repr, unknown))}")


def known_keys(value: dict[str, Any], cls: type, where: str) -> None:
    """Only fields of `cls`, and every one it cannot do without (a record without one read as a TypeError)."""
    only(value, (f.name for f in fields(cls)), where)
    needed = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in needed if name not in value]
    if missing:
        raise fail(where, f"lacks {', '.join(missing)}")
