"""A Chrome/Kineto trace file as a stream of event chunks: the document is never in memory at once.

A 3M-event trace is 1.25 GB of JSON. `json.loads` of it held 2.3 GB of Python objects for 1M events, and
ijson's C backend (yajl2_c), which streams, took 15 s for 1M events before any column was built (28 MB/s).
What this module does instead (measured on the 1M-event trace of benchmarks/kineto_speed.py, 419 MB):

- Decompression runs in a thread of python-isal (`igzip_threaded`): 0.27 s of CPU for 419 MB against
  0.84 s for the stdlib's gzip, and it overlaps the parse.
- The top-level object is walked key by key; `traceEvents` is cut into pieces of about `CHUNK` bytes at
  an element boundary (a `}` followed by `,` or `]`). Each piece is read into columns by the C reader
  (analysis/readers/_kineto_fast.c: 0.34 of the CPU of what follows, docs/performance.md) or, where it
  steps aside or is not built, decoded by msgspec into structs that hold only the fields the reader
  needs: 2.9–3.7 s for the 1M events, 4× less than ijson. The structs
  are chosen by `ph` (a tagged union: a flow event, a third of a trace, decodes only its category; 18% less
  decoding than one struct for all), and where an element has no known phase, as `Event`s.
- What is held is bounded whatever the gzip's ratio (docs/dev/reliability.md, "Kineto traces"): one event,
  top-level value or key is at most `max_value()` bytes of JSON as read, or one line names the limit; of
  the top-level object only `TOP_KEYS` are kept; integers past Python's digit limit and nesting past its
  recursion limit are one line too.
- Whitespace is skipped by a regular expression, a buffer at a time, and a run that reaches the buffer's
  end is dropped before reading on: 1 GB of spaces costs a pass in C and a few MiB, not a Python step a
  byte and the whole run held (a scan that read on from the run's start took 65 s over 100 MB of leading
  spaces).
- A cut is only a guess (a `}` inside a string or a nested list can look like a boundary): a wrong guess
  fails to decode, and that piece is then parsed element by element with the stdlib's `raw_decode`, which
  also takes what msgspec refuses but `json.loads` accepts (lone surrogates, NaN, `args` that is not an
  object). So every file gives the events `json.loads` would.

Floats stay exact: msgspec's `float_hook=str` gives a float's text (1695835542514261.123 stays those
digits), and the reader turns text into integer nanoseconds digit by digit.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.errors import WHOLE, ExportError
from analysis.readers.kineto_events import _FIELDS, NO_ARGS, Args, Event, event_of

CHUNK = 1 << 22  # bytes of JSON per msgspec decode: big enough to amortise a call, small next to the file
MAX_VALUE = 16 << 20  # the most bytes of JSON one event or top-level value may take (a real one: KiBs)
MAX_VALUE_ENV = "HARNESS_KINETO_MAX_VALUE_MB"  # the same in MiB, where a user sets it
# what the reader reads of the top-level object (kineto_build._meta); any other key's value is dropped
TOP_KEYS = frozenset({"schemaVersion", "distributedInfo", "deviceProperties", "baseTimeNanoseconds"})


_FIELDS["args"] = ("args", Args, NO_ARGS)


_JSON = json.JSONDecoder(parse_float=str)
_SPACE = re.compile(rb"[ \t\n\r]*")  # skipped in C: a run of whitespace costs no Python step per byte
_SPACE_TEXT = re.compile(r"[ \t\n\r]*")
# what follows the last `}` of an element: `]`, or `,` and the next element's `{` (a name can hold `}, `)
_AFTER = re.compile(rb"[ \t\n\r]*(?:\]|,(?=[ \t\n\r]*\{))")
# possessive (never backtracks): `(?:[^"\\]|\\.)*` kept a mark a byte, 1 GB for a key of 8 MiB
_KEY = re.compile(rb'"(?:[^"\\]++|\\.)*+"')


def max_value() -> int:
    """The most bytes of JSON one event, top-level value or key may take: MAX_VALUE, or the MiB
    HARNESS_KINETO_MAX_VALUE_MB gives (at least a piece's CHUNK: a value within a piece is read whole)."""
    env = os.environ.get(MAX_VALUE_ENV)
    if not env:
        return MAX_VALUE
    least = max(CHUNK >> 20, 1)
    try:
        if not WHOLE.fullmatch(env.strip()):  # int() takes any script's digits ('٨' as 8) and '1_0'
            raise ValueError(env)
        mib = int(env)
        if mib < least:
            raise ValueError(mib)
    except ValueError:
        raise ExportError(
            f"{MAX_VALUE_ENV}={env!r} is not a whole number of MiB from {least} (a piece the reader reads at "
            "once) up: fix or unset it"
        ) from None
    return mib << 20


def too_deep(path: Path) -> ExportError:
    """The error of a value nested past what Python's parsers (msgspec's, the stdlib's) and json.dumps
    take: their recursion limit."""
    return ExportError(
        f"{path} holds a value nested too deeply to read (past Python's recursion limit, "
        f"{sys.getrecursionlimit():,} levels): not a trace torch.profiler writes"
    )


@dataclass
class Text:
    """Whole events, not decoded yet: bytes `start` to `end` of the stream's buffer `buf` (kept as it
    is: a buffer is never changed, only replaced) or of a worker's slot; `tail` is what followed the last
    one in the file: whitespace and the comma (none before the closing bracket, left for a Stop)."""

    buf: bytes
    start: int
    end: int
    tail: bytes
    lead: int = 0  # whitespace before it that was skipped, not held (see `stand_in`)
    closes = False

    @property
    def size(self) -> int:
        """Bytes of `data`."""
        return self.end - self.start + 2

    @property
    def data(self) -> bytes:
        """The events as a JSON list (a copy)."""
        return b"".join((b"[", memoryview(self.buf)[self.start : self.end], b"]"))

    def write(self, into: memoryview) -> None:
        """Write `data` at the start of `into` (a slot of shared memory), copying the text once; the text
        is then read from there (the stream's buffer is let go)."""
        size = self.size
        into[0] = 0x5B  # [
        into[1 : size - 1] = memoryview(self.buf)[self.start : self.end]
        into[size - 1] = 0x5D  # ]
        self.buf, self.start, self.end = into, 1, size - 1  # type: ignore[assignment]

    def raw(self) -> bytes:
        """The file's bytes this piece was made of."""
        return b"".join((stand_in(self.lead), self.buf[self.start : self.end], self.tail))


@dataclass
class Parsed:
    """Events the stdlib parsed (where msgspec did not take the text), with the text they came from."""

    events: list[Event]
    text: bytes
    lead: int = 0
    closes = False

    def raw(self) -> bytes:
        return stand_in(self.lead) + self.text


@dataclass
class Stop:
    """The end of traceEvents (`error` None, `text` the closing bracket and the whitespace before it), or
    an error in the text. The caller settles every piece before it, then goes on: a piece handed back
    means the stop came from a wrong cut and parsing resumes there; otherwise the list ends here, or the
    error is raised."""

    text: bytes
    error: ExportError | None = None
    lead: int = 0
    closes = True

    def raw(self) -> bytes:
        return stand_in(self.lead) + self.text


def stand_in(lead: int) -> bytes:
    """What stands for a piece's leading whitespace that ran past the buffer and was skipped: `lead`
    spaces (a bad cut may have put them inside a string, where only spaces can be), or, for a run that
    held other whitespace (-1: never inside a valid string), one newline, which keeps an invalid string
    invalid."""
    return b"\n" if lead < 0 else b" " * lead


class TraceStream:
    """Iterate over a trace's events in pieces, in file order: Text (to be decoded by the caller, with
    msgspec: `DECODE`) or Parsed. Where a Text does not decode (a wrong cut, or text msgspec refuses),
    the caller hands it back with `rewind`, with every piece it has taken since, before it takes the next
    after a piece that closes the list; the stream then parses that text element by element.
    After the iteration, `top` holds the top-level object's TOP_KEYS ({} when the file is a
    bare list of events)."""

    def __init__(self, path: Path, read: Callable[[int], bytes]) -> None:
        self.path = path
        self._read = read
        self.buf = b""
        self.pos = 0
        self.offset = 0  # where the buffer starts in the document
        self.eof = False
        self.top: dict[str, Any] = {}
        self.has_events = False  # whether the document held an events list
        self.rewound = False  # text was handed back: parse it element by element
        self.max_value = max_value()

    def rewind(self, raw: bytes) -> None:
        """Put `raw` (the text of pieces already taken, in order) back in front of what is left."""
        self.buf = raw + self.buf[self.pos :]
        self.offset += self.pos - len(raw)
        self.pos = 0
        self.rewound = True

    # --- the buffer --------------------------------------------------------------------------------

    def _more(self, at_least: int = 0) -> bool:
        """Append at least `at_least` bytes (CHUNK where 0; fewer at the end of the file); False at the
        end."""
        if self.eof:
            return False
        at_least = at_least or CHUNK
        self.offset += self.pos
        parts: list[bytes | memoryview] = [memoryview(self.buf)[self.pos :]]  # copied once, by the join
        self.pos = 0
        got = 0
        while got < at_least:
            data = self._read(max(at_least - got, 1 << 20))
            if not data:
                self.eof = True
                break
            parts.append(data)
            got += len(data)
        self.buf = b"".join(parts)
        return got > 0

    def _peek(self) -> bytes:
        """The next byte that is not whitespace (b"" at the end), with pos on it. Whitespace that runs to
        the buffer's end is dropped before reading on, so a long run is neither held nor scanned twice."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos : self.pos + 1]

    def _space(self) -> int:
        """Skip whitespace at pos for as long as it runs to the buffer's end, reading on; how much was
        skipped (-1 where it was not only spaces: see `stand_in`). Whitespace that ends in the buffer
        stays there."""
        skipped = 0
        while True:
            end = _SPACE.match(self.buf, self.pos).end()
            if end < len(self.buf) or self.eof:
                return skipped
            if skipped >= 0:
                only_spaces = self.buf.count(b" ", self.pos, end) == end - self.pos
                skipped = skipped + end - self.pos if only_spaces else -1
            self.pos = end
            self._more()

    def _invalid(self, why: str) -> ExportError:
        return ExportError(f"{self.path} is not valid JSON ({why}): not a Kineto trace")

    def _too_long(self, what: str) -> ExportError:
        """The error of a value longer than the limit, starting at pos."""
        mib = self.max_value / (1 << 20)
        return ExportError(
            f"{self.path} holds {what} at byte {self.offset + self.pos:,} longer than {mib:g} MiB of JSON, "
            f"the most one may take: not a trace torch.profiler writes ({MAX_VALUE_ENV} raises the limit)"
        )

    def _too_many_digits(self, at: int) -> ExportError:
        """The error of an integer past Python's digit limit in the value at document offset `at`."""
        digits = sys.get_int_max_str_digits()
        return ExportError(
            f"{self.path} holds an integer of more than {digits:,} digits (in the value at byte {at:,}), "
            "Python's limit on the digits of an integer: not a trace torch.profiler writes"
        )

    def _parse_error(self, e: json.JSONDecodeError | RecursionError, text: str) -> ExportError:
        """The error of parsing `text` (which starts at pos), placed in the whole document."""
        if isinstance(e, RecursionError):
            return too_deep(self.path)
        at = self.offset + self.pos + len(text[: e.pos].encode())
        return self._invalid(f"{e.msg.removesuffix(' at')} at byte {at:,}")  # json's own "... starting at"

    def _text(self, data: bytes) -> str:
        """UTF-8 text of buffered bytes; a character cut by the buffer's end is left out."""
        try:
            return data.decode()
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data" and e.start >= len(data) - 3:
                return data[: e.start].decode()
            raise self._invalid(f"not UTF-8 at byte {self.offset + self.pos + e.start:,}") from None

    def _value(self) -> Any:
        """Parse one JSON value at pos with the stdlib (floats as text), reading on as needed, up to the
        limit (`max_value`)."""
        window = 1 << 16
        while True:
            text = self._text(self.buf[self.pos : self.pos + window])
            try:
                value, end = _JSON.raw_decode(text)
            except RecursionError as e:  # never from a cut: the text before it is the document's
                raise self._parse_error(e, text) from None
            except json.JSONDecodeError as e:
                if self.pos + window < len(self.buf):
                    window *= 4
                    continue
                if len(self.buf) - self.pos > self.max_value:
                    error = (
                        self._parse_error(e, text) if _malformed(e, len(text)) else self._too_long("a value")
                    )
                    raise error from None
                if self._more(max(CHUNK, min(len(self.buf), self.max_value))):
                    continue
                raise self._parse_error(e, text) from None
            except ValueError:  # an integer past Python's digit limit
                raise self._too_many_digits(self.offset + self.pos) from None
            size = len(text[:end].encode())
            if size > self.max_value:
                raise self._too_long("a value")
            self.pos += size
            return value

    # --- the document ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Text | Parsed | Stop]:
        first = self._peek()
        if not first:
            raise ExportError(f"{self.path} is empty: not a Kineto trace")
        if first == b"[":
            self.has_events = True
            yield from self._array()
        elif first == b"{":
            yield from self._object()
        else:
            self._value()
            if self._peek():
                raise self._invalid("extra data")
            raise ExportError(f"{self.path} is JSON but not a Chrome/Kineto trace")
        if self._peek():
            raise self._invalid("extra data after the document")

    def _object(self) -> Iterator[Text | Parsed | Stop]:
        self.pos += 1
        if self._peek() == b"}":
            self.pos += 1
            return
        while True:
            if self._peek() != b'"':
                raise self._invalid("expected a key")
            m = _KEY.match(self.buf, self.pos)
            while m is None and len(self.buf) - self.pos <= self.max_value and self._more():
                m = _KEY.match(self.buf, self.pos)
            if m is None or m.end() - self.pos > self.max_value:
                if len(self.buf) - self.pos > self.max_value:
                    raise self._too_long("a key")
                raise self._invalid("unterminated key")
            key = json.loads(m[0])
            self.pos = m.end()
            if self._peek() != b":":
                raise self._invalid("expected ':'")
            self.pos += 1
            if self._peek() == b"[" and key == "traceEvents":
                self.has_events = True
                yield from self._array()
            else:
                value = self._value()
                if key in TOP_KEYS:  # any other: read (it must be JSON), not kept
                    self.top[key] = value
            sep = self._peek()
            self.pos += 1
            if sep == b"}":
                return
            if sep != b",":
                raise self._invalid("expected ',' or '}'")

    def _array(self) -> Iterator[Text | Parsed | Stop]:
        """The events of the list at pos, in pieces; pos ends after its closing bracket. A piece's text
        starts where the previous one ended, whitespace included (a run past the buffer's end is skipped,
        and stood in for: `stand_in`): handed back, it is the file's text."""
        self.pos += 1
        slow = False
        while True:
            piece: Text | Parsed | Stop
            try:
                lead = self._space()
                start = self.offset + self.pos
                if self._peek() == b"]":
                    self.pos += 1
                    piece = Stop(self._since(start))
                else:
                    self.pos = start - self.offset  # the whitespace left in the buffer is the piece's
                    piece = self._piece(start, slow)
                piece.lead = lead
            except ExportError as e:
                piece = Stop(b"", e)
            yield piece
            slow = self.rewound
            self.rewound = False
            if isinstance(piece, Stop) and not slow:
                if piece.error is not None:
                    raise piece.error
                return

    def _piece(self, start: int, slow: bool) -> Text | Parsed:
        if len(self.buf) - self.pos < CHUNK:
            self._more()
        cut = self._cut()
        if cut is not None and not slow:
            end, after = cut
            if self.buf[after - 1 : after] == b"]":
                after -= 1
            text = Text(self.buf, self.pos, end, self.buf[end:after])
            self.pos = after
            return text
        return Parsed(self._elements(cut), self._since(start))

    def _since(self, start: int) -> bytes:
        """The text from document offset `start` to pos (still in the buffer, or the caller's pieces)."""
        return self.buf[start - self.offset : self.pos] if start >= self.offset else b""

    def _cut(self) -> tuple[int, int] | None:
        """(end of the last whole element, position after the `,` or `]` that follows it) in the buffer's
        first CHUNK bytes from pos; None where none is seen."""
        buf = self.buf
        q = buf.rfind(b"}", self.pos, self.pos + CHUNK)
        while q >= 0:
            m = _AFTER.match(buf, q + 1)
            if m is not None:
                return q + 1, m.end()
            q = buf.rfind(b"}", self.pos, q)
        return None

    def _drop_space(self, at: int, size: int) -> None:
        """Take out the `size` bytes of whitespace `at` bytes after pos (an element's end, before its
        separator is read): a long run is then not held while the buffer grows to reach the separator."""
        at += self.pos
        self.buf = self.buf[self.pos : at] + self.buf[at + size :]
        self.offset += self.pos
        self.pos = 0

    def _elements(self, cut: tuple[int, int] | None) -> list[Event]:
        """Parse elements one by one from pos, up to the cut when given (where a good cut would end),
        reading on until at least one is whole; pos ends after a comma or on the closing bracket."""
        events: list[Event] = []
        while True:
            end = len(self.buf) if cut is None else cut[0]
            text = self._text(self.buf[self.pos : end])
            i, n, at_cut = 0, len(text), False
            while True:
                i = _SPACE_TEXT.match(text, i).end()
                if i == n:
                    break
                try:
                    value, k = _JSON.raw_decode(text, i)
                except RecursionError as e:  # never from a cut: the text before it is the document's
                    raise self._parse_error(e, text) from None
                except json.JSONDecodeError as e:
                    if _malformed(e, n):
                        raise self._parse_error(e, text) from None
                    break
                except ValueError:  # an integer past Python's digit limit
                    raise self._too_many_digits(self.offset + self.pos + len(text[:i].encode())) from None
                if k - i > self.max_value // 4 and len(text[i:k].encode()) > self.max_value:
                    self.pos += len(text[:i].encode())
                    raise self._too_long("an event")
                value_end, k = k, _SPACE_TEXT.match(text, k).end()
                if k == n:  # the element ends where the text does
                    if cut is not None:  # at the cut, whose separator is known
                        events.append(event_of(value))
                        at_cut = True
                    elif self.eof:
                        events.append(event_of(value))
                        i = n
                    elif not events and k > value_end:
                        self._drop_space(len(text[:value_end].encode()), k - value_end)
                    break
                if text[k] not in ",]":
                    raise self._invalid(f"expected ',' or ']' after an event, found {text[k]!r}")
                events.append(event_of(value))
                if text[k] == "]":
                    i = k
                    break
                i = k + 1
            if at_cut:
                self.pos = cut[1] - (self.buf[cut[1] - 1 : cut[1]] == b"]")
            else:
                self.pos += len(text[:i].encode())
            if events:
                return events
            if cut is not None:  # a wrong cut: try the whole buffer
                cut = None
                continue
            if len(self.buf) - self.pos > self.max_value:  # no element ends within the limit
                raise self._too_long("an event")
            if not self._more(max(CHUNK, min(len(self.buf), self.max_value))):
                rest = self._text(self.buf[self.pos :])
                try:
                    _JSON.raw_decode(rest)
                except (json.JSONDecodeError, RecursionError) as e:
                    raise self._parse_error(e, rest) from None
                except ValueError:
                    raise self._too_many_digits(self.offset + self.pos) from None
                raise self._invalid("unterminated traceEvents list")


def _malformed(e: json.JSONDecodeError, n: int) -> bool:
    """Whether a parse error is in the text itself, not only where it was cut short: a string, or a token
    the cut split (`-Infinity`, the longest: 9 bytes; a unicode escape; `1e+`) fails where it starts."""
    return e.pos < n - 9 and not e.msg.startswith("Unterminated string")
