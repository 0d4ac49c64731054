"""Limits checked before anything runs: counts the results database can store, and how many ranks this
machine can hold.

A count past int64 (`--steps 100000000000000000000000`) ran and was then lost on save (SQLite stores
signed 64-bit integers); a seed past it failed inside torch with a traceback. `--nproc 1000` started a
thousand Python processes with torch until the OOM killer stepped in; `--repeats 1000000000` started fresh
processes one after another until stopped. Each is refused here with one line.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from datetime import timedelta
from typing import Any

from harness.core.errors import UsageError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# the longest --rank-timeout: torch.distributed takes it as a timedelta (harness.execution.ranks.distributed)
RANK_TIMEOUT_MAX = timedelta.max // timedelta(seconds=1)
# the option each RunConfig field comes from, for the error line
OPTIONS = {
    "batch_size": "--batch-size", "context_length": "--context-length", "vocab_size": "--vocab-size",
    "warmup": "--warmup", "steps": "--steps", "seed": "--seed", "new_tokens": "--new-tokens",
    "power_period_ms": "--power-period", "nproc": "--nproc", "nnodes": "--nnodes", "node_rank": "--node-rank",
    "loader_workers": "--loader-workers", "loss_every": "--loss-every", "delay_ms": "--delay-rank",
    "delay_rank": "--delay-rank",
}  # fmt: skip
# runs a command starts one after another, each in a fresh process (seconds each): 10,000 of the smallest
# model take most of a day; more is a slip (`--repeats 1000000000`), which ran until stopped
MAX_REPEATS = 10_000
RANK_MEMORY = 400 * 1024**2  # a rank's Python, torch and a tiny model: ~350 MB resident, measured on CPU
RANKS_PER_CORE = 4
MAX_RANKS_ENV = "HARNESS_MAX_RANKS"


def check_storable(config: Any) -> None:
    """UsageError naming the first integer setting of `config` (a RunConfig) the database cannot store."""
    for f in fields(config):
        value = getattr(config, f.name)
        if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            option = OPTIONS.get(f.name, f.name)
            raise UsageError(
                f"{option} {value} is out of range: the results database stores integers from {INT64_MIN} "
                f"to {INT64_MAX}"
            )


def digits(text: str) -> int | None:
    """`text` as a whole number when it is ASCII digits alone (str.isdigit takes '²', which int refuses, and
    '١', which it reads as 1), else None."""
    return int(text) if text.isascii() and text.isdigit() else None


def check_count(option: str, value: int) -> None:
    if not INT64_MIN <= value <= INT64_MAX:
        raise UsageError(f"{option} {value} is out of range: at most {INT64_MAX}")


def rank_limit() -> tuple[int, str]:
    """(the most ranks this machine starts, why): HARNESS_MAX_RANKS, else by cores and available memory."""
    env = os.environ.get(MAX_RANKS_ENV)
    if env:
        try:  # ASCII digits, as every number the harness reads (int() takes '٣' as 3)
            value = int(env) if re.fullmatch(r"\s*[+-]?[0-9]+\s*", env) else None
        except ValueError:  # past the digits int() reads
            value = None
        if value is None:
            raise UsageError(f"{MAX_RANKS_ENV}={env!r} is not a whole number of ranks")
        if value < 1:
            raise UsageError(f"{MAX_RANKS_ENV}={env!r} must be 1 or more")
        return value, f"{MAX_RANKS_ENV}={value}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    by_cores = RANKS_PER_CORE * cores
    available = _available_memory()
    by_memory = max(1, available // RANK_MEMORY) if available else by_cores
    if by_memory < by_cores:
        return by_memory, f"{available / 1024**3:.1f} GiB available at ~{RANK_MEMORY // 1024**2} MB a rank"
    return by_cores, f"{cores} cores, {RANKS_PER_CORE} ranks a core"


def check_ranks(nproc: int) -> None:
    """UsageError when `nproc` ranks would not fit this machine (one line: the limit and the override)."""
    if nproc <= 1:
        return
    limit, why = rank_limit()
    if nproc > limit:
        raise UsageError(
            f"--nproc {nproc} is more ranks than this machine holds (at most {limit}: {why}); "
            f"set {MAX_RANKS_ENV}={nproc} to start them anyway"
        )


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


NAME_BYTES = 200  # a run id is the name and 21 characters more; a file name holds 255 bytes
# characters a terminal does not show as themselves (Unicode's control, format, separator and surrogate
# categories): never in a name
HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs")


def hidden(text: str) -> bool:
    """Whether `text` holds a control or format character (ESC, a bidi mark, U+2028, …)."""
    import unicodedata

    return any(unicodedata.category(c) in HIDDEN for c in text)


def check_run_name(name: str | None) -> None:
    """UsageError unless `name` is a name (it becomes a run id and the report's file name): not empty, no
    folder in it, no comma (one run id), no leading '-' (an option), no control characters, at most
    NAME_BYTES bytes."""
    if name is None:
        return
    why = None
    if not name.strip():
        why = "it is empty"
    elif name in (".", ".."):
        why = "it names a folder (the current one or the one above), not a run"
    elif "/" in name or "\\" in name:
        why = "it holds a folder separator (a name, not a path: --profile-dir says where files go)"
    elif "," in name:
        why = "it holds ',' (`harness diff A1,A2 B` reads a comma as between two runs)"
    elif name.startswith("-"):
        why = "it starts with '-' (`harness show RUN` and the others would read the run id as an option)"
    elif hidden(name):
        why = "it holds control characters"
    elif len(name.encode("utf-8", "surrogatepass")) > NAME_BYTES:
        why = f"it is longer than {NAME_BYTES} bytes (it becomes a file name)"
    if why:
        shown = name if len(name) <= 60 else name[:40] + "…" + name[-10:]
        raise UsageError(f"--name {shown!r} is not a run name: {why}")


def check_baseline_name(name: str) -> None:
    """UsageError unless `name` can name a baseline that `harness diff baseline:NAME` finds again: not empty,
    no ':' (it follows `baseline:`), no ',' (a comma separates the runs of a side), no control characters."""
    why = None
    if not name.strip():
        why = "it is empty"
    elif ":" in name or "," in name:
        why = "it holds ':' or ',' (`diff baseline:NAME` would read it as more than a name)"
    elif hidden(name):
        why = "it holds control characters"
    if why:
        raise UsageError(f"{name!r} is not a baseline name: {why}")


def default_run_name(program: str) -> str:
    """A program's file name as a name `--name` would take: cut to NAME_BYTES bytes (a whole character at
    the end), a comma (`harness diff A1,A2 B` splits at commas), a backslash and a control or format
    character each made `_`, and a leading `-` (a run id read as an option). A file name may hold them all,
    and a run id holding one was stored, then refused by `harness import` (a run the database would not take
    could not be stored later)."""
    import unicodedata

    data = program.encode("utf-8", "surrogateescape")[:NAME_BYTES].decode("utf-8", "ignore")
    name = "".join("_" if c in ",\\" or unicodedata.category(c) in HIDDEN else c for c in data)
    if name.startswith("-"):  # a run id read as an option by every command that takes one
        name = "_" + name[1:]
    return name if name.strip() else "program"
