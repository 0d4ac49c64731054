"""Interruptions as exceptions: Ctrl-C (SIGINT) and SIGTERM both end a run early and keep what it measured.

Python turns SIGINT into KeyboardInterrupt; `sigterm_raises` makes SIGTERM raise `Terminated`, a
KeyboardInterrupt too, so one `except KeyboardInterrupt` stores an interrupted run whichever signal came.

A signal ignored when the harness started (SIGINT of a background job started by a shell that is not
interactive, or of `nohup`; a `trap '' TERM`) stays ignored: no block here takes it, so it is neither
raised nor held nor passed on to a child; a SIGINT or SIGHUP ignored is ignored in the children too
(harness.execution.supervisor), also past a program between that resets it (nsys's launcher, torchrun):
IGNORED_ENV names them, and the worker ignores them again (`keep_ignored`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a scheduler, `kill`, a parent that is going away)."""


def signal_of(interrupt: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: SIGTERM for Terminated, else SIGINT."""
    return signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT


def raised(sig: int) -> KeyboardInterrupt:
    """The exception standing for `sig` (Terminated for SIGTERM, else KeyboardInterrupt), to raise where a
    signal was first passed on to a child and the caller is to end as the signal would have ended it."""
    return Terminated() if sig == signal.SIGTERM else KeyboardInterrupt()


def name(sig: int) -> str:
    return signal.Signals(sig).name


def interrupted(sig: int, what: str) -> str:
    """How an interrupted run's error reads: "interrupted by SIGINT after 3 of 10 measured steps"."""
    return f"interrupted by {name(sig)} {what}"


def stopped_by(message: str | None) -> str:
    """ "interrupted by SIGTERM": the stop an interrupted run's error (`interrupted`'s message) names."""
    return f"interrupted by {name(signal_in(message))}"


def signal_in(message: str | None) -> int:
    """The signal named by `interrupted`'s message; SIGINT where it names none."""
    found = re.search(r"interrupted by (SIG[A-Z]+)", message or "")
    if found and found.group(1) in signal.Signals.__members__:
        return signal.Signals[found.group(1)]
    return signal.SIGINT


def exit_code(sig: int) -> int:
    """The shell's convention for a process ended by `sig`: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(sig)


def ended_by(returncode: int | None) -> int | None:
    """The signal that ended a process, from its exit code as Python (-N) or nsys and a shell (128 + N)
    give it; None where it exited."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode <= 128 + 64:
        return returncode - 128
    return None


def ignored(sig: int) -> bool:
    """Whether `sig` is ignored (SIG_IGN) here: then it is left so, by every block here."""
    try:
        return signal.getsignal(sig) is signal.SIG_IGN
    except ValueError:  # not a signal of this system
        return False


# the signals the harness was started ignoring that its children keep ignored, by name: "SIGINT,SIGHUP"
IGNORED_ENV = "HARNESS_IGNORED_SIGNALS"
KEPT_IGNORED = (signal.SIGINT, signal.SIGHUP)


def ignored_here() -> str:
    """IGNORED_ENV's value for the children of this process: which of KEPT_IGNORED it ignores."""
    return ",".join(signal.Signals(sig).name for sig in KEPT_IGNORED if ignored(sig))


def keep_ignored() -> None:
    """Ignore the signals IGNORED_ENV names again: a program between the harness and this process may have
    set them back to their default (nsys's launcher does)."""
    names = os.environ.get(IGNORED_ENV, "").split(",")
    for sig in KEPT_IGNORED:
        if signal.Signals(sig).name in names:
            signal.signal(sig, signal.SIG_IGN)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated in the main thread (elsewhere, or where it is ignored:
    left as it is)."""
    if ignored(signal.SIGTERM):
        yield
        return
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# the lists of the `deferred` blocks now open (main thread), outermost first
_HOLDING: list[list[int]] = []


@contextlib.contextmanager
def first_raises() -> Iterator[None]:
    """Within the block, the first SIGINT or SIGTERM raises (KeyboardInterrupt, Terminated) in the main thread
    and later ones are dropped: the block is stopping already, and what it measured is kept. A worker that
    nsys told to stop is often still finishing when nsys exits, and the supervisor, ending what nsys left
    behind, sends it SIGTERM again; raised there, that second signal would throw away the steps the worker
    measured. A signal ignored before the block stays ignored; a handler the block sets itself (SIG_IGN
    while it writes its result) stays as it set it. Main thread only (elsewhere: the handlers are left)."""

    came: list[int] = []

    def first(signum: int, frame: object) -> None:
        if not came:
            came.append(signum)
            raise raised(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            if not ignored(sig):  # a background job's SIGINT stays ignored
                previous[sig] = signal.signal(sig, first)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is first:
                signal.signal(sig, handler)


@contextlib.contextmanager
def deferred(take_over: bool = False) -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM back until the block is done (a save is never cut in half), then act on the
    first that came as its handler would have. Main thread only (elsewhere: nothing is held back). The
    block gets the list of signals held so far: it may stop waiting when one came, and take the signal from
    it (`taken`) to act on it itself.

    A block inside another holds for itself and hands what it did not act on to the one around it.
    `take_over`: the signals the blocks around it hold already are this block's too (taken from them), for
    one that acts on them as they come: harness.execution.supervisor passes them on to the command it
    starts, so that one that came as a run was being set up reaches it.

    A signal ignored before the block is not held: it stays ignored.

    Handlers, not a signal mask: a mask covers one thread, and torch or rich keep others that would take
    the signal instead."""
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    try:
        previous = {
            sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM) if not ignored(sig)
        }
    except ValueError:
        yield held
        return
    if take_over:
        for outer in _HOLDING:
            held.extend(outer)
            outer.clear()
    _HOLDING.append(held)
    try:
        yield held
    finally:
        del _HOLDING[next(i for i, h in enumerate(_HOLDING) if h is held)]  # itself, not an equal list
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:  # one taken over from a block around it and ignored since: acted on as ignored (dropped)
            _act(held[0], previous.get(held[0], signal.getsignal(held[0])))


def taken(held: list[int]) -> int | None:
    """The first signal a `deferred` block has held (its list), taken from it so that the block does not act
    on it: for one that acts on it itself once its run is stored; None where none came."""
    sig = held[0] if held else None
    held.clear()
    return sig


def hand_on(sig: int) -> None:
    """Act on `sig` as the handler now in place would have, had it come now: a `deferred` block around
    this holds it; elsewhere it is raised (KeyboardInterrupt, Terminated where `sigterm_raises`). For a
    signal a supervisor passed on to a command that ended on its own all the same (a worker that finished
    its run): whoever started it learns of it after the run, which is kept as it ended."""
    _act(sig, signal.getsignal(sig))


def _act(sig: int, handler: object) -> None:
    if callable(handler):
        handler(sig, None)
    elif handler in (signal.SIG_DFL, None):
        signal.raise_signal(sig)
