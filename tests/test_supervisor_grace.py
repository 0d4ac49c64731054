"""harness.execution.supervisor after SIGTERM: what is left is let finish while it works (nsys writing and
exporting a big report), killed once idle or past the cap, and at once at a second signal. The supervisor
runs as a real process, its windows shortened by a stand-in for `python -m harness.execution.supervisor`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from procs import MARK, REPO, default_sigint, marked, wait_until

from harness.execution import supervisor

# `python -m harness.execution.supervisor -- COMMAND…` with GRACE_S, CAP_S and LEFTOVER_WAIT_S given first
SHORTENED = textwrap.dedent(
    """
    import sys
    from harness.execution import supervisor
    supervisor.GRACE_S, supervisor.CAP_S, supervisor.LEFTOVER_WAIT_S = map(float, sys.argv[1:4])
    supervisor.main(sys.argv[4:])
    """
)
# told SIGTERM, keeps a CPU busy for argv[2] seconds (nsys importing and exporting), then says so and exits
BUSY = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    folder = pathlib.Path(sys.argv[1])

    def finish(signum, frame):
        end = time.monotonic() + float(sys.argv[2])
        while time.monotonic() < end:
            pass
        print("finished", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    (folder / "ready").touch()
    time.sleep(300)
    """
)
# takes SIGINT and SIGTERM, notes that one came, and goes on sleeping: hung
HUNG = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    folder = pathlib.Path(sys.argv[1])
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: (folder / "got").touch())
    (folder / "ready").touch()
    time.sleep(300)
    """
)
# leaves the program argv[2] (given FOLDER and the rest) running in a session of its own, as nsys leaves
# the program it told to stop, and exits
LEAVES = textwrap.dedent(
    """
    import pathlib, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1], *sys.argv[3:]], start_new_session=True)
    while not pathlib.Path(sys.argv[1], "ready").exists():
        time.sleep(0.05)
    """
)


def supervise(
    folder: Path, mark: str, code: str, *args: str, grace: float, cap: float = 600.0
) -> subprocess.Popen[str]:
    """The supervisor over `python -c CODE FOLDER ARGS…`, started once that command is ready."""
    windows = [str(grace), str(cap), "0.5"]
    proc = subprocess.Popen(
        [sys.executable, "-c", SHORTENED, *windows, "--", sys.executable, "-c", code, str(folder), *args],
        env={**os.environ, "PYTHONPATH": str(REPO), MARK: mark},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,  # a background job's SIGINT is ignored, and would be in the supervisor
    )
    wait_until(lambda: (folder / "ready").exists(), 60, "the supervised command to start")
    return proc


@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice-at-once"])
def test_a_command_working_past_the_grace_after_sigterm_finishes(tmp_path: Path, twice: bool) -> None:
    """nsys told to stop writes and exports its report; a big one took longer than the fixed 120 s, and was
    killed: the report lost. Working (CPU time), it is now let finish, its output kept. A SIGTERM sent
    again at once (a stop sent to a whole cgroup reaches the supervisor directly and through the harness)
    is the same request, not a second one."""
    mark = uuid.uuid4().hex
    grace = 1.5
    proc = supervise(tmp_path, mark, BUSY, str(3 * grace + 1), grace=grace)
    proc.send_signal(signal.SIGTERM)
    if twice:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert (proc.returncode, out) == (0, "finished\n")


def test_an_idle_command_is_killed_once_the_grace_passes(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    proc = supervise(tmp_path, mark, HUNG, grace=1.5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL and (tmp_path / "got").exists()
    assert marked(mark) == []


def test_a_command_working_without_end_is_killed_at_the_cap(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    proc = supervise(tmp_path, mark, BUSY, "300", grace=1.0, cap=3.0)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL and marked(mark) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c-twice", "sigterm-twice"])
def test_a_second_signal_kills_at_once(tmp_path: Path, sig: int) -> None:
    """A user (or systemd) insisting: the second signal, a moment after the first, kills everything left
    without waiting out the grace (here longer than the test waits). SIGTERM twice waited it out."""
    mark = uuid.uuid4().hex
    proc = supervise(tmp_path, mark, HUNG, grace=600.0)
    proc.send_signal(sig)
    wait_until(lambda: (tmp_path / "got").exists(), 60, "the command to get the first signal")
    time.sleep(supervisor.ECHO_S + 0.5)  # past the moment a repeat is taken for the same request
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and marked(mark) == []


def test_a_program_left_behind_working_past_the_grace_finishes(tmp_path: Path) -> None:
    """nsys told to stop exits without waiting for its program: left behind, still writing its result
    after the supervisor's SIGTERM, it was killed GRACE_S later; working, it is let finish."""
    mark = uuid.uuid4().hex
    proc = supervise(tmp_path, mark, LEAVES, BUSY, "4", grace=1.5)
    out, _ = proc.communicate(timeout=120)
    assert (proc.returncode, out) == (0, "finished\n")


def test_the_grace_ends_on_idleness_or_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree's CPU time read from /proc: while it grows the grace goes on up to CAP_S; once it stops,
    GRACE_S later the grace is over. Without /proc (nothing read) it is GRACE_S, as a fixed clock."""
    ticks = [0]
    monkeypatch.setattr(supervisor, "_tree", lambda root: {7: (root, "R", "nsys", ticks[0])})
    working = supervisor._Grace(1, 0.0)
    now = 0.0
    while now < supervisor.CAP_S - supervisor.SAMPLE_S:
        now += supervisor.SAMPLE_S
        ticks[0] += os.sysconf("SC_CLK_TCK")  # a whole CPU
        assert not working.over(now)
    assert working.over(supervisor.CAP_S)

    idle = supervisor._Grace(1, 0.0)
    assert not idle.over(supervisor.GRACE_S - supervisor.SAMPLE_S) and idle.over(supervisor.GRACE_S)

    monkeypatch.undo()
    monkeypatch.setattr(supervisor, "_processes", dict)
    blind = supervisor._Grace(1, 0.0)
    assert not blind.over(supervisor.GRACE_S - supervisor.SAMPLE_S) and blind.over(supervisor.GRACE_S)
