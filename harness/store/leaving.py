"""Which runs a command's reads leave out: inside `leaving_out`, a store's read over several runs (`runs`,
the dashboard, the runs a diff measures its drift from, a run's baseline) reads past a run whose row fails
its check (harness.store.stored_check), and its line is put in the dict given, for the command to say after
its output; a run asked for by name still refuses. Outside (a library caller), a damaged run refuses every
read. Apart from the store's modules, so that a command's errors are said without loading SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# {run id: its line}: the runs left out of reads over several runs while a command collects them; None: a
# damaged run refuses every read
_COLLECTED: ContextVar[dict[str, str] | None] = ContextVar("harness_left_out", default=None)


@contextmanager
def leaving_out() -> Iterator[dict[str, str]]:
    """Inside, a store opened reads over several runs past a damaged one (one asked for by name still
    refuses): it is left out, and its line put in the dict given, for the command to say after its output."""
    collected: dict[str, str] = {}
    token = _COLLECTED.set(collected)
    try:
        yield collected
    finally:
        _COLLECTED.reset(token)


def collector() -> dict[str, str] | None:
    """Where a store opened now puts the runs it leaves out (leaving_out); None: it leaves none out."""
    return _COLLECTED.get()
