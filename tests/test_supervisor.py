"""harness.execution.supervisor: what the harness starts ends with it, however the harness ends; Ctrl-C is
passed on."""

from __future__ import annotations

import json
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

# a command that leaves an orphan in a session of its own (as nsys's agent and its profiled program are),
# says it is ready, and exits 5 on Ctrl-C
CHILD = textwrap.dedent(
    """
    import pathlib, subprocess, sys, time
    subprocess.run(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 &"])
    pathlib.Path(sys.argv[1], "ready").touch()
    try:
        time.sleep(300)
    except KeyboardInterrupt:
        print("child got SIGINT", flush=True)
        sys.exit(5)
    """
)
PARENT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from harness.execution import supervisor
    from harness.core.signals import sigterm_raises
    folder = Path(sys.argv[1])
    with sigterm_raises():
        done = supervisor.run([sys.executable, "-c", sys.argv[2], str(folder)], cleanup=[folder])
    print(json.dumps({"returncode": done.returncode, "interrupted": done.interrupted, "stdout": done.stdout}))
    """
)


def test_exit_code_signal_and_output_are_passed_on() -> None:
    assert supervisor.run([sys.executable, "-c", "import sys; sys.exit(4)"]).returncode == 4
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert supervisor.run([sys.executable, "-c", code]).returncode == -signal.SIGKILL
    done = supervisor.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert (done.stdout, done.stderr, done.interrupted) == ("out\n", "err\n", None)
    merged = supervisor.run([sys.executable, "-c", "print('a')"], merge_stderr=True)
    assert merged.stdout == "a\n" and merged.stderr == ""


def test_a_program_that_prints_a_lot_is_kept_by_its_end_only() -> None:
    """Every reader of a command's output wants its end; a program printing gigabytes held whole made the
    harness's memory grow about tenfold its output."""
    code = (
        "import sys\nfor i in range(60000): sys.stdout.write(f'line {i:06d} ' + 'x' * 40 + chr(10))\n"
        "print('last')"
    )
    done = supervisor.run([sys.executable, "-c", code], merge_stderr=True)
    kept = done.stdout.encode()
    assert 3 * supervisor.KEPT_BYTES < 60000 * 53  # the program printed more than three times what is kept
    assert supervisor.KEPT_BYTES - 53 <= len(kept) <= supervisor.KEPT_BYTES
    lines = done.stdout.splitlines()
    assert lines[-1] == "last" and lines[-2] == "line 059999 " + "x" * 40
    assert lines[0].startswith("line ") and len(lines[0]) == 52  # begins at a whole line


# prints 12 bursts of 64 KiB, a pause after each (the supervisor trims while it waits), then how much of its
# output file is on disk and how long it is
BURSTS = textwrap.dedent(
    """
    import os, sys, time
    for burst in range(12):
        for i in range(1024):
            sys.stdout.write(f"burst {burst:02d} line {i:04d} " + "x" * 44 + chr(10))
        sys.stdout.flush()
        time.sleep(0.3)
    st = os.fstat(1)
    print(f"on disk {st.st_blocks * 512} of {st.st_size}")
    """
)


def test_a_program_that_prints_a_lot_keeps_its_end_on_disk_only() -> None:
    """The whole output went to a temporary file: a program printing tens of GB could fill the disk. Now
    the file keeps about the end kept (twice it at most, plus what is printed between two looks), the rest
    is freed, and how much was dropped is said."""
    kept = 16 * 1024
    done = supervisor.run([sys.executable, "-c", BURSTS], merge_stderr=True, kept=kept)
    lines = done.stdout.splitlines()
    on_disk, size = (int(x) for x in lines[-1].removeprefix("on disk ").split(" of "))
    assert size == 12 * 1024 * 64  # 786,432 bytes printed
    assert on_disk <= 2 * kept + 64 * 1024 + 2 * supervisor.BLOCK  # 102 KiB at most, not 768
    assert lines[-2] == "burst 11 line 1023 " + "x" * 44 and "\0" not in done.stdout
    assert len(done.stdout.encode()) <= kept
    assert done.dropped == size + len(lines[-1]) + 1 - len(done.stdout.encode())
    assert done.dropped_note() == (
        f"the output was long: its first {done.dropped:,} bytes were dropped, its end kept"
    )
    assert supervisor.run([sys.executable, "-c", "print('a')"]).dropped_note() is None


def test_a_line_longer_than_the_end_kept_keeps_its_end() -> None:
    """A program whose last output is one line longer than what is kept (a result printed as one line), with
    short lines after it (as nsys writes its own): the line's end is kept, the program's last words in it,
    where the whole line was dropped up to the next line break."""
    kept = 16 * 1024
    code = (
        "import sys; sys.stdout.write('start\\n' + 'é' * (2 * 16 * 1024) + 'END'); "
        "sys.stdout.write('\\nGenerated:\\n    report.nsys-rep\\n')"
    )
    done = supervisor.run([sys.executable, "-c", code], merge_stderr=True, kept=kept)
    assert done.stdout.endswith("éEND\nGenerated:\n    report.nsys-rep\n")
    assert done.stdout.startswith("é") and "\ufffd" not in done.stdout
    printed = (
        len("start\n") + 2 * len("é".encode()) * 16 * 1024 + len("END\nGenerated:\n    report.nsys-rep\n")
    )
    assert done.dropped == printed - len(done.stdout.encode()) and len(done.stdout.encode()) <= kept


def _start_parent(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, str]:
    mark = uuid.uuid4().hex
    folder = tmp_path / "harness-tmp"
    folder.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(folder), CHILD],
        env={**os.environ, "PYTHONPATH": str(REPO), MARK: mark},
        stdout=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_until(lambda: (folder / "ready").exists(), 60, "the supervised command to start")
    # the orphan may be between fork and exec a moment after `ready`, its environment not yet readable
    wait_until(lambda: len(marked(mark)) >= 4, 10, "parent, supervisor, command and orphan to be seen")
    return parent, folder, mark


@pytest.mark.slow
def test_ctrl_c_is_passed_on_and_leftovers_are_ended(tmp_path: Path) -> None:
    parent, folder, mark = _start_parent(tmp_path)
    os.killpg(parent.pid, signal.SIGINT)  # what a terminal does: the foreground group, here the parent alone
    out, _ = parent.communicate(timeout=60)
    done = json.loads(out)
    assert done == {"returncode": 5, "interrupted": signal.SIGINT, "stdout": "child got SIGINT\n"}
    assert marked(mark) == []  # the orphan in its own session was ended too
    assert folder.exists()  # the harness is alive: its temporary folder is its own business


@pytest.mark.slow
def test_sigterm_is_passed_on(tmp_path: Path) -> None:
    parent, _, mark = _start_parent(tmp_path)
    parent.send_signal(signal.SIGTERM)
    out, _ = parent.communicate(timeout=60)
    assert json.loads(out)["returncode"] == -signal.SIGTERM
    assert json.loads(out)["interrupted"] == signal.SIGTERM
    assert marked(mark) == []


# a command that leaves a program in a session of its own, as nsys leaves the program it was told to stop:
# told SIGTERM, the program takes longer to finish than the supervisor used to give it before SIGKILL
FINISHING = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    folder = pathlib.Path(sys.argv[1])

    def finish(signum, frame):
        time.sleep(2 * float(sys.argv[2]) + 2)
        (folder / "finished").touch()
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    (folder / "ready").touch()
    time.sleep(300)
    """
)
LEAVES = textwrap.dedent(
    """
    import pathlib, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], start_new_session=True)
    while not pathlib.Path(sys.argv[2], "ready").exists():
        time.sleep(0.05)
    """
)


@pytest.mark.slow
def test_a_program_left_behind_finishing_after_sigterm_is_let_finish(tmp_path: Path) -> None:
    """nsys told to stop passes the signal to its program and exits without waiting for it: what it leaves
    behind may be a worker still writing its result. It was killed LEFTOVER_WAIT_S after the supervisor's
    SIGTERM; it now has the grace a command told SIGTERM has."""
    args = [FINISHING, str(tmp_path), str(supervisor.LEFTOVER_WAIT_S)]
    done = supervisor.run([sys.executable, "-c", LEAVES, *args])
    assert done.returncode == 0 and (tmp_path / "finished").exists()


@pytest.mark.slow
def test_killed_parent_takes_its_children_and_temporary_folder(tmp_path: Path) -> None:
    parent, folder, mark = _start_parent(tmp_path)
    parent.kill()
    parent.wait()
    wait_until(lambda: not marked(mark), 30, f"no process left; left: {marked(mark)}")
    wait_until(lambda: not folder.exists(), 10, "the temporary folder to be removed")


@pytest.mark.usefixtures("sigint_raises")
def test_signals_held_back_during_a_save_arrive_after_it() -> None:
    import threading

    from harness.core.signals import deferred

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)  # a second thread (torch, rich) must not let it through
    other.start()
    reached = []
    try:
        with pytest.raises(KeyboardInterrupt), deferred():
            os.kill(os.getpid(), signal.SIGINT)
            reached.append("the rest of the block")
    finally:
        stop.set()
        other.join()
    assert reached == ["the rest of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_ignored_before_a_save_is_not_held_and_stays_ignored(sig: int) -> None:
    """A harness started as a background job has SIGINT ignored (`trap '' TERM`: SIGTERM): a block that
    holds signals leaves it ignored, holds none that comes, and raises nothing after it."""
    from harness.core.signals import deferred

    previous = signal.signal(sig, signal.SIG_IGN)
    try:
        with deferred() as held:
            assert signal.getsignal(sig) is signal.SIG_IGN
            os.kill(os.getpid(), sig)
            with deferred(take_over=True) as inner:  # as the supervisor's, passing on what it takes
                os.kill(os.getpid(), sig)
            reached = True
        assert reached and held == [] and inner == []
        assert signal.getsignal(sig) is signal.SIG_IGN
    finally:
        signal.signal(sig, previous)


def test_an_ignored_sigterm_is_not_raised() -> None:
    from harness.core.signals import sigterm_raises

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_raises():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_command_inherits_sigint_ignored() -> None:
    """A harness ignoring SIGINT starts its supervisor and the command under it ignoring it too: Python
    there sets up no KeyboardInterrupt, and a SIGINT sent to it does not stop it."""
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        done = supervisor.run([sys.executable, "-c", code])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (done.returncode, done.stdout) == (0, "True\n")


@pytest.mark.slow
def test_a_harness_started_ignoring_sigint_ignores_it(tmp_path: Path) -> None:
    """`harness run --repeats` as a background job (SIGINT ignored) is not stopped by a SIGINT to its
    process group (`kill -INT 0`, a Ctrl-C in the terminal meant for the foreground job): its runs go on and
    end ok, and its worker ignores SIGINT too."""
    from procs import ignore_sigint, ignores, logged_steps, output, start

    from harness.store.results import ResultsStore

    tmp, db, mark = tmp_path / "tmp", tmp_path / "r.sqlite", uuid.uuid4().hex
    tmp.mkdir()
    args = ["run", "char", "--device", "cpu", "--repeats", "2", "--steps", "8", "--warmup", "0", "-b", "1"]
    proc = start([*args, "-t", "32", "--db", str(db)], tmp_path, mark, ignore_sigint, TMPDIR=str(tmp))
    wait_until(lambda: logged_steps(tmp) >= 1, 300, "the first run to measure a step")
    # the supervisor and the worker under it, which is midway through its 8 steps
    under = [int(p.split()[0]) for p in marked(mark) if " -m harness.execution." in p]
    ignoring = [ignores(pid, signal.SIGINT) for pid in under]
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(300) == 0, output(tmp_path)
    assert ignoring == [True, True]
    runs = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert "interrupted" not in output(tmp_path) and "Traceback" not in output(tmp_path)
    assert marked(mark) == []


def test_a_worker_raises_on_its_first_signal_only_and_an_ignored_one_stays_ignored() -> None:
    """The worker's handlers (first_raises): the first SIGINT or SIGTERM raises, later ones are dropped (the
    run is stopping already); SIGINT ignored before, as in a background job, is not raised either."""
    from harness.core.signals import Terminated, first_raises

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with first_raises():
            signal.raise_signal(signal.SIGINT)
            with pytest.raises(Terminated):
                signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == previous[signal.SIGTERM]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_is_never_raised_inside_the_wait_for_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C landing in Popen.wait after it took the lock it reaps the child under, before its `try`: the
    KeyboardInterrupt left the lock taken, every later wait saw the command still running, and
    `run --repeats` interrupted waited forever on a worker that had ended (a zombie). The signal is now
    taken as it comes, never raised there, and passed on as before."""
    real_wait = subprocess.Popen.wait
    raised_inside: list[bool] = []

    def wait(self: subprocess.Popen, timeout: float | None = None) -> int:  # type: ignore[type-arg]
        if not raised_inside:  # the first wait: the signal lands while the lock is taken
            wait_until(ready.exists, 60, "the command to set its handler")  # not during its start-up
            assert self._waitpid_lock.acquire(False)  # type: ignore[attr-defined]
            try:
                signal.raise_signal(signal.SIGINT)
                raised_inside.append(False)
            except KeyboardInterrupt:
                raised_inside.append(True)
                raise
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    ready = tmp_path / "ready"
    code = (  # Ctrl-C's own handler, even where the tests run as a background job (SIGINT ignored)
        "import pathlib, signal, sys, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "try:\n    pathlib.Path(sys.argv[1]).touch()\n    time.sleep(60)\n"
        "except KeyboardInterrupt:\n    sys.exit(5)"
    )
    done = supervisor.run([sys.executable, "-c", code, str(ready)])
    assert raised_inside == [False]
    assert done.interrupted == signal.SIGINT and done.returncode == 5  # passed on: the command ends on it


def test_the_supervisors_timed_wait_is_never_woken_by_raising(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After SIGTERM the supervisor waits in steps of POLL_S (its grace period runs); a signal then raised
    _Wake inside Popen.wait, where it could leave the lock Popen reaps under taken. A timed wait is let
    end by itself and the signal acted on after it."""
    ready = tmp_path / "ready"
    code = "import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\ntime.sleep(60)"
    # Ctrl-C's default (a background job's SIGINT is ignored), and no signal during the child's start-up
    child = subprocess.Popen([sys.executable, "-c", code, str(ready)], preexec_fn=default_sigint)
    wait_until(ready.exists, 60, "the child to start")
    sup = supervisor._Supervisor([], [], os.getppid())
    sup.grace = supervisor._Grace(os.getpid(), time.monotonic())  # a SIGTERM's grace running: timed waits
    real_wait = subprocess.Popen.wait
    raised_inside: list[bool] = []

    def wait(self: subprocess.Popen, timeout: float | None = None) -> int:  # type: ignore[type-arg]
        if not raised_inside:
            try:
                sup.on_signal(signal.SIGINT, None)
                raised_inside.append(False)
            except supervisor._Wake:
                raised_inside.append(True)
                raise
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    try:
        sup.wait(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert raised_inside == [False]
    assert sup.passed == signal.SIGINT and child.returncode != 0  # passed on, and the child ended on it
