"""What can go wrong with a results database, and the one line that says so.

A busy SQLite file (another process holds the write lock) is waited for: SQLite's own busy timeout per
attempt, and attempts retried with backoff for HARNESS_DB_TIMEOUT seconds in all (default 30). Everything
else (a corrupt file, a file that is no database, an unknown URL scheme, a driver that is not installed)
becomes a HarnessError at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError, SQLAlchemyError

from harness.core.errors import HarnessError, UsageError, first_line

T = TypeVar("T")

TIMEOUT_ENV = "HARNESS_DB_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0
ATTEMPT_S = 5.0  # SQLite's busy timeout for one attempt
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
# how to install the driver modules SQLAlchemy imports for a URL (others: pip install MODULE)
DRIVERS = {
    "psycopg": "pip install 'harness[postgresql]'",  # SQLAlchemy 2.1's driver for postgresql://
    "psycopg2": "pip install psycopg2-binary, or pip install 'harness[postgresql]' and write postgresql+psycopg://",
    "MySQLdb": "pip install mysqlclient",
}


def busy_timeout() -> float:
    """Seconds to keep trying a busy database: HARNESS_DB_TIMEOUT, default 30."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    text = raw.strip()
    try:  # ASCII digits, as every number the harness reads (float() takes '٣' as 3 and '1_0' as 10)
        value = float(text) if text.isascii() and "_" not in text else -1.0
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise UsageError(f"{TIMEOUT_ENV} must be a number of seconds (0 or more), got {raw!r}")
    return value


def is_busy(error: BaseException) -> bool:
    text = str(getattr(error, "orig", error)).lower()
    return isinstance(error, OperationalError) and ("locked" in text or "busy" in text)


def retry_busy(fn: Callable[[], T], timeout: float, stop: Callable[[], bool] | None = None) -> T:
    """Call `fn`; while the database is busy, call it again after a growing pause, `timeout` s in all (or
    until `stop()` says to give up: a signal came)."""
    deadline = time.monotonic() + timeout
    pause = FIRST_BACKOFF_S
    while True:
        try:
            return fn()
        except OperationalError as e:
            if not is_busy(e) or time.monotonic() + pause > deadline or (stop is not None and stop()):
                raise
        time.sleep(pause)
        pause = min(pause * 2, MAX_BACKOFF_S)


def explain(error: SQLAlchemyError, where: str, timeout: float) -> HarnessError:
    """One line for a database error, naming the database and what to do."""
    reason = first_line(getattr(error, "orig", None) or error)
    text = reason.lower()
    if is_busy(error):
        return HarnessError(
            f"results database {where} is locked by another process (waited {timeout:g} s; "
            f"{TIMEOUT_ENV} sets how long)"
        )
    if "file is not a database" in text:
        return HarnessError(f"{where} is not a SQLite database; pass --db a results database or a new file")
    if "malformed" in text or "corrupt" in text or "could not decode" in text:  # flipped bytes in a cell
        return HarnessError(
            f"results database {where} is corrupt ({reason}); restore a copy or pass --db a new file"
        )
    if "unable to open" in text:
        return cannot_open(where, reason)
    if "readonly" in text or "read-only" in text:
        return HarnessError(f"results database {where} is read-only ({reason}); pass --db a writable one")
    return HarnessError(f"results database {where}: {reason}")


def cannot_open(where: str, reason: object) -> HarnessError:
    """A database that could not be opened (its folder, its file), and where to put one instead."""
    return HarnessError(
        f"cannot open results database {where}: {reason}; pass --db PATH_OR_URL or set HARNESS_DB to a "
        "writable location"
    )


def missing_driver(scheme: str, error: ImportError) -> HarnessError:
    module = (error.name or first_line(error)).split(".")[0]
    how = DRIVERS.get(module, f"pip install {module}")
    return HarnessError(f"a {scheme}:// results database needs the Python package {module!r}: {how}")
