"""A capture's health verdict, kept in its export's cache entry, so that every table read from that export
afterwards says when the capture failed its checks.

The checks themselves are not run at each read: on an export of a million kernels `harness health` takes
many times what `harness kernels` takes, and a table served from the cache opens no trace at all. So
`capture_health` keeps the verdict wherever the checks run (`harness health EXPORT`, `advise`, a run's own
examination, the dashboard) and a table's read takes it back with the standard library alone
(analysis.trace.results), like a kept table. A capture whose health is not known yet is read without a
word. A Kineto trace's verdict is kept in its cache entry too, though its tables are computed each time.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.trace import results

if TYPE_CHECKING:
    from analysis.trace.trace import Trace

VERDICT = "health-verdict"  # the name it is kept under: no table's


def keep_verdict(trace: Trace, failed: Sequence[str], line: str) -> None:
    """Keep the checks `trace`'s capture failed (none: it passed) and its health `line` in its cache entry,
    where it has one."""
    import pandas as pd

    results.keep(trace, VERDICT, {}, [(VERDICT, pd.DataFrame({"Check": list(failed)}, dtype=object))], [line])


def failed_captures(
    paths: Sequence[Path], shown: Sequence[Path] | None = None, *, cache: bool = True
) -> list[str]:
    """A warning for each export of `paths` whose capture failed its health checks when they last ran
    (named as `shown`, what the user gave: a report read through its export); none with `cache` off, where
    nothing kept is read."""
    warnings: list[str] = []
    if not cache:
        return warnings
    for path, name in zip(paths, shown or paths, strict=True):
        kept = results.cached(path, VERDICT, {}, traces=True)
        if kept is None or not kept.tables:
            continue
        failed = [row[0] for row in kept.tables[0][1].itertuples(index=False)]
        if failed:
            warnings.append(
                f"{name} failed its health checks ({', '.join(failed)}): the numbers read from it may be "
                f"wrong; `harness health {shlex.quote(str(name))}` says why"
            )
    return warnings
