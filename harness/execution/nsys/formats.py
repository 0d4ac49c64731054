"""Which `nsys stats` format the tables print (analysis.tables.stats_format): the one a user names
(`--stats-format`, HARNESS_STATS_FORMAT), else that of the nsys in use, else that of the nsys that wrote the
export. The nsys in use is asked for its version only (`nsys --version`, about 0.1 s), and only by the
commands whose tables differ between formats."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from analysis.tables.stats_format import AUTO, EXPORT, check, release
from harness.core.errors import NsysError, UsageError
from harness.execution.nsys.find import _version, candidates

ENV = "HARNESS_STATS_FORMAT"


@functools.cache
def installed_version() -> str | None:
    """The version of the nsys the harness would use (HARNESS_NSYS, PATH, …, .tools/nsys); None when there
    is none, or it does not run. Never raises: a table command works without nsys."""
    for path, _ in candidates():
        p = Path(path)
        if p.is_file() and os.access(p, os.X_OK):
            try:
                return _version(p)
            except NsysError:
                return None
    return None


def nsys_in_use_format(choice: str | None = AUTO, nsys_version: str | None = None) -> str:
    """The stats format to print: `choice` when it names one; for auto, HARNESS_STATS_FORMAT, else the
    release of `nsys_version` (the nsys that recorded a run) or of the installed nsys, else EXPORT (the
    nsys that wrote each export)."""
    chosen = choice if choice and choice != AUTO else os.environ.get(ENV, AUTO) or AUTO
    if chosen != AUTO:
        try:
            return check(chosen)
        except ValueError as e:
            where = f"{ENV}={chosen}" if choice in (None, AUTO) else f"--stats-format {chosen}"
            raise UsageError(f"{where}: {e}") from None
    version = nsys_version or installed_version()
    found = release(version)
    return f"{found[0]}.{found[1]}" if found else EXPORT
