"""Standard output and error as the harness writes them, whatever they turn out to be.

- Closed (`>&-`): Python gives no stream at all. A command that prints ends in `error: cannot write to
  standard output: it is closed` and exit 1; one that writes only files and notes runs as usual. Closed
  standard error: notes and errors are dropped, exit codes stay.
- A write that fails (`>/dev/full`, a full disk): `error: cannot write to standard output: No space left
  on device`, exit 1, once. What the command stored before (a run) stays stored. A pipe its reader closed
  (`| head`) ends quietly, as click ends it.
- An encoding that cannot hold the harness's own characters (`PYTHONIOENCODING=ascii` or `latin-1`,
  `LC_ALL=C PYTHONUTF8=0`): tables are drawn in ASCII (rich's own fallback), names are shortened with `...`,
  and every other character the encoding lacks is written as its ASCII stand-in (`—` as `-`, `×` as `x`)
  or as an escape (`\\u00e9`), never an exception. The same error handler, `harness`, makes a file name
  of invalid UTF-8 (lone surrogates) printable.
- The terminal's size: COLUMNS and LINES when they are whole numbers from 1 on (larger than MAX_SIZE:
  MAX_SIZE), else the size of whichever standard stream is a terminal, else 80 × 25. COLUMNS=0 or a word
  is as if unset, never a width of nothing.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys
from typing import Any

from harness.cli.terminal.text import can_encode, use_encoding
from harness.core.errors import HarnessError

ERRORS = "harness"  # the codec error handler below
MAX_SIZE = 10_000  # columns or lines; a larger COLUMNS or LINES is taken as this
DEFAULT_SIZE = (80, 25)
# the harness's own characters and what stands in for them where the output's encoding lacks them
STAND_INS = {
    "…": "...", "—": "-", "–": "-", "×": "x", "≥": ">=", "≤": "<=", "≠": "!=", "→": "->", "←": "<-",
    "·": "-", "±": "+/-", "≈": "~", "µ": "u", "‘": "'", "’": "'", "“": '"', "”": '"', "•": "*", "✓": "ok",
    "✗": "x", "²": "^2", "⁶": "^6", "³": "^3", "¹": "^1", "⁰": "^0", "✔": "ok", "─": "-", "━": "-",
    "│": "|", "\u00a0": " ", "\u202f": " ",
}  # fmt: skip
NAMES = {"stdout": "standard output", "stderr": "standard error"}


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _handler(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = []
    for c in error.object[error.start : error.end]:
        stand_in = STAND_INS.get(c)
        try:
            if stand_in is None:
                raise UnicodeError
            stand_in.encode(error.encoding)
            out.append(stand_in)
        except (UnicodeError, LookupError):
            out.append(_escape(c))
    return "".join(out), error.end


codecs.register_error(ERRORS, _handler)


class StreamError(HarnessError):
    """Standard output or error failed: closed, full, gone."""


def _size(name: str, fallback: int) -> int:
    text = os.environ.get(name, "").strip()
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return min(int(text), MAX_SIZE)
    return fallback


def terminal_size() -> tuple[int, int]:
    """Columns and lines to draw for (see the module's docstring)."""
    width, height = DEFAULT_SIZE
    for fd in (1, 2, 0):
        try:
            size = os.get_terminal_size(fd)
        except (OSError, ValueError):
            continue
        if size.columns > 0:
            width, height = size.columns, size.lines or height
            break
    return _size("COLUMNS", min(width, MAX_SIZE)), _size("LINES", min(height, MAX_SIZE))


class _Closed:
    """What stands for a standard stream the command was started without."""

    encoding = "utf-8"
    errors = ERRORS
    closed = False

    def __init__(self, name: str) -> None:
        self.name = f"<{name}>"

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("write() argument must be str")
        raise OSError(errno.EBADF, "it is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "it is closed")

    @property
    def buffer(self) -> Any:
        raise OSError(errno.EBADF, "it is closed")


class _Dropped(_Closed):
    """Closed standard error: what is said there is lost, nothing fails for it."""

    def write(self, text: str) -> int:
        return len(text)


class Guarded:
    """A standard stream whose failures end the command in one line (StreamError), once: after a failure
    its file descriptor points at /dev/null, so the interpreter's last flush cannot fail again."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream = stream
        self._name = name
        self.failed: str | None = None  # what the first failure said

    def _failed(self, e: OSError) -> StreamError | OSError:
        if self.failed is not None:
            return StreamError(self.failed)
        self.failed = f"cannot write to {NAMES[self._name]}: {e.strerror or e}"
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        if e.errno == errno.EPIPE:
            return e  # click ends a closed pipe quietly (exit 1)
        return StreamError(self.failed)

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes for a binary stream with write(b""): the stream answers
            return self._stream.write(text)
        if not text:
            return 0  # ... and then with write(""): nothing to write, nothing to fail
        try:
            return self._stream.write(text)
        except OSError as e:
            raise self._failed(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise self._failed(e) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def prepare() -> None:
    """Put guarded standard streams in place of sys.stdout and sys.stderr (see the module's docstring),
    with the `harness` error handler, and tell the table layer what the output's encoding holds."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, Guarded(_Closed(name), name) if name == "stdout" else _Dropped(name))
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(OSError, ValueError):
                reconfigure(errors=ERRORS)
        setattr(sys, name, Guarded(stream, name))
    encoding = getattr(sys.stdout, "encoding", None)
    if not can_encode("…—", encoding):
        use_encoding(encoding, ERRORS)


def finish(code: int | str | None) -> int | str | None:
    """Flush standard output at the end (a full disk shows here when the output was small); the exit
    code, 1 when the flush failed."""
    try:
        sys.stdout.flush()
    except StreamError as e:
        say_error(str(e))
        return 1
    except OSError:
        return 1
    return code


def say_error(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"error: {message}", file=sys.stderr)
        sys.stderr.flush()
