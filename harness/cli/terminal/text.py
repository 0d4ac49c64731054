"""How outside text is shown in a terminal's table: control characters as visible escapes, what the
output's encoding cannot hold replaced before it is measured, long names shortened in the middle (names
that differ staying different), and a header's long words abbreviated when a column must be narrower than
them (`abbreviation`: a few usual short forms, else the word's head and a dot; a note gives each in full)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

MAX_TEXT = 72  # a name never takes more than this, even on a wide terminal (unless wide=True)
# Every character that is not shown as itself: controls (C0, C1, DEL), format characters (the bidi
# marks, overrides and isolates that reorder what a terminal shows, zero-width spaces and joiners, the soft
# hyphen, the byte-order mark, tags), the line and paragraph separators (U+2028, U+2029) and lone
# surrogates (a file name of invalid UTF-8): Unicode's categories Cc, Cf, Zl, Zp and Cs
# (tests/test_stream_faults.py checks this class against unicodedata).
CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
# The output's encoding where it lacks the harness's own characters (harness.cli.terminal.streams): names
# are then shortened with ASCII dots, and text is made to fit it before it is measured
OUTPUT: dict[str, Any] = {"encoding": None, "ellipsis": "…", "empty": "—"}


def use_encoding(encoding: str | None, errors: str = "backslashreplace") -> None:
    """Draw for an output in `encoding` (None: one that holds every character), whose characters it lacks
    `errors` (a codec error handler) replaces."""
    OUTPUT.update(
        encoding=encoding,
        errors=errors,
        ellipsis="…" if can_encode("…", encoding) else "...",
        empty="—" if can_encode("—", encoding) else "-",
    )


def can_encode(text: str, encoding: str | None) -> bool:
    """Whether an output in `encoding` (None: UTF-8) holds every character of `text`."""
    try:
        text.encode(encoding or "utf-8")
    except (UnicodeError, LookupError):
        return False
    return True


def visible(text: str, keep: str = "") -> str:
    """`text` with control characters (ESC, BEL, NUL, newlines, …) as visible escapes, except those in `keep`.

    A name from an export can then neither move the cursor nor retitle the terminal nor break a table row.
    """

    def sub(m: re.Match[str]) -> str:
        c = m.group()
        if c in keep:
            return c
        code = ord(c)
        return _NAMED.get(c) or (
            f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
        )

    out = CONTROL.sub(sub, text)
    encoding = OUTPUT["encoding"]
    if encoding is not None:  # what the output cannot hold, as it will be written (before it is measured)
        out = out.encode(encoding, OUTPUT["errors"]).decode(encoding)
    return out


def shorten(text: str, width: int = MAX_TEXT) -> str:
    """Keep the head and tail of a long name (kernel names differ at both ends)."""
    if len(text) <= width:
        return text
    mark = OUTPUT["ellipsis"]
    if width <= len(mark):
        return mark[:width]
    room = width - len(mark)
    head = _cut(text, room * 2 // 3, back=True)
    tail = len(text) - _cut(text, len(text) - (room - room * 2 // 3), back=False)
    return f"{text[:head]}{mark}{text[len(text) - tail :]}" if tail else f"{text[:head]}{mark}"


ESCAPE = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[tnr])")  # what visible() writes


def _cut(text: str, at: int, back: bool) -> int:
    """`at`, or where an escape of visible() that `at` falls inside starts (`back`) or ends: a name is
    never cut through `\\x1b`."""
    for m in ESCAPE.finditer(text, max(0, at - 10), at + 10):
        if m.start() < at < m.end():
            return m.start() if back else m.end()
    return at


def _around(text: str, start: int, width: int) -> str:
    """`text` in `width` cells keeping its head, its tail and the part from `start` on (where it differs
    from names that shorten alike)."""
    mark = OUTPUT["ellipsis"]
    room = width - 2 * len(mark)
    head, tail = max(1, room // 3), max(1, room // 4)
    middle = room - head - tail
    if middle < 1 or start <= head:
        return shorten(text, width)
    if start + middle >= len(text) - tail:  # the difference is near the end: keep the end whole
        return f"{text[:head]}{mark}{text[-(width - head - len(mark)) :]}"
    return f"{text[:head]}{mark}{text[start : start + middle]}{mark}{text[-tail:]}"


def _common_head(texts: Sequence[str]) -> int:
    """How many leading characters all `texts` share."""
    n = min(len(t) for t in texts)
    return next((i for i in range(n) if len({t[i] for t in texts}) > 1), n)


def distinct(texts: Sequence[str], width: int) -> tuple[list[str], list[str]]:
    """`texts` shortened to `width`, different names staying different: where two shorten alike, the part
    where they differ is kept; where even that is not enough, they are numbered (`#1`) and the second list
    holds the full names (`#1: …`) for a note."""
    short = {t: shorten(t, width) for t in dict.fromkeys(texts)}
    alike: dict[str, list[str]] = {}
    for t, s in short.items():
        alike.setdefault(s, []).append(t)
    for group in (g for g in alike.values() if len(g) > 1):
        start = max(0, _common_head(group) - 2)  # two characters of context
        for t in group:
            short[t] = _around(t, start, width)
    full: list[str] = []
    seen: dict[str, list[str]] = {}
    for t, s in short.items():
        seen.setdefault(s, []).append(t)
    for group in (g for g in seen.values() if len(g) > 1):
        for t in group:
            mark = f" #{len(full) + 1}"
            short[t] = shorten(t, max(1, width - len(mark))) + mark
            full.append(f"{mark.strip()}: {t}")
    return [short[t] for t in texts], full


# The usual short forms of words that headers spell out (lower case); a word not here is cut to its head
ABBREVIATIONS = {
    "overhead": "ovhd", "instances": "inst", "duration": "dur", "average": "avg", "median": "med",
    "minimum": "min", "maximum": "max", "percent": "pct", "throughput": "thru", "compute": "comp",
    "memory": "mem", "kernels": "kerns", "kernel": "kern", "utilization": "util", "bandwidth": "bw",
    "seconds": "s",
}  # fmt: skip
LONG_WORD = 6  # a header word longer than this, not in ABBREVIATIONS, is cut to its head and a dot


def abbreviation(word: str) -> str | None:
    """The short form of a header word (its capital kept), or None where it has none: a short word, a
    unit or a number."""
    short = ABBREVIATIONS.get(word.lower())
    if short is None:
        if len(word) <= LONG_WORD or not word.isalpha():
            return None
        short = f"{word[: LONG_WORD - 2]}."
    return short[0].upper() + short[1:] if word[0].isupper() else short
