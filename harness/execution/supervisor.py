"""Child processes that cannot outlive the harness. Every worker and every nsys it starts runs under
`python -m harness.execution.supervisor [--cleanup DIR]... -- COMMAND...`, which:

- runs in a session of its own, so a terminal's Ctrl-C reaches only the harness, which passes it on;
- gets SIGTERM from the kernel when the harness dies, even by kill -9 (Linux PR_SET_PDEATHSIG, which
  fires when the thread that started it ends: the harness starts children from its main thread; other
  systems poll for a new parent every POLL_S);
- is a child subreaper (Linux): what COMMAND leaves behind is re-parented to it instead of to PID 1. nsys
  needs this: its agent daemonises and its launcher puts the program in a session of its own, so neither is
  in nsys's process group, and a killed nsys used to leave both running;
- passes SIGINT and SIGTERM on to COMMAND (nsys then stops collecting, passes the signal to the program
  and writes and exports its report; the worker keeps the steps it measured). After a SIGTERM it kills
  everything left once that has done no work for GRACE_S (its CPU time, from /proc: `_Grace`), or CAP_S
  after the signal; at a second SIGINT (Ctrl-C twice) or a second SIGTERM (someone insisting) at once;
- leaves SIGINT and SIGHUP ignored where the harness was started with them ignored (a background job,
  `nohup`): COMMAND inherits them ignored, and its environment names them (signals.IGNORED_ENV) for the
  worker, which nsys's launcher starts with them set back to their default; an ignored SIGINT is also
  blocked in COMMAND, as nsys takes it over (stopping the capture, or losing its agent). SIGTERM it always
  takes: the harness stops a hung rank with it, and the kernel sends it when the harness dies (a harness
  ignoring SIGTERM passes none on);
- when COMMAND is done, ends what it left behind (SIGTERM, then SIGKILL when the same grace ends: the
  program nsys told to stop may still be writing its result when nsys exits), and if the harness is gone
  removes the folders given with --cleanup (the harness's temporary folders: nobody else will).

Starting it costs one bare Python start-up (about 30 ms); it imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from harness.core import signals

PARENT_ENV = "HARNESS_SUPERVISOR_PARENT"
POLL_S = 0.1
# after SIGTERM, what is left is let work (nsys writing its report and exporting it: 35 s for a small CPU
# capture with 2023.4 on a busy 2-core machine, where 30 s killed it part way through the export; a big
# capture takes longer, and a clock that ends it loses the report): it is killed once it has done no work
# for GRACE_S (less than IDLE_SHARE of one CPU over it: a process blocked for good uses none, one stuck
# behind a polling thread nearly none; importing and exporting keep a CPU busy, writing costs CPU to copy),
# or at CAP_S: a tree that spins without end is never idle, and a lost report costs a measurement where a
# spinning tree costs only this time, so it is long
GRACE_S = 120.0
IDLE_SHARE = 0.01
CAP_S = 1800.0
SAMPLE_S = 1.0  # how often the grace reads the tree's CPU time (all of /proc: ~2 ms per 100 processes)
# a SIGTERM this soon after the one taken is no second one: a stop sent to every process of a cgroup reaches
# the supervisor directly and again through the harness; the kernel sends one when the harness dies
ECHO_S = 1.0
LEFTOVER_WAIT_S = 3.0  # after COMMAND exits: time for what it started to exit by itself
# what is kept of a command's output: its end (every reader wants a tail: the program's last lines, nsys's
# closing lines); a program that prints gigabytes must not make the harness hold them all in memory, nor
# fill the disk: once its file holds twice this, what lies before its last KEPT_BYTES is freed (`_trim`)
KEPT_BYTES = 1 << 20
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
BLOCK = 4096  # holes are punched in whole blocks: the end kept is never touched
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


# --- the harness's side ---------------------------------------------------------------------------------


@dataclass
class Finished:
    returncode: int  # COMMAND's exit code; negative: killed by that signal
    stdout: str  # its last KEPT_BYTES, from a line's start (a long line's: its end)
    stderr: str  # empty with merge_stderr; its last KEPT_BYTES too
    interrupted: int | None = None  # the first signal that came (SIGINT: Ctrl-C; SIGTERM)
    held: bool = False  # that signal was kept from COMMAND (`run`'s hold), and no later one passed on
    dropped: int = 0  # bytes of its output (stdout and stderr) before the ends kept, not kept

    def dropped_note(self) -> str | None:
        """What was left out of the output, said once (None: nothing)."""
        return dropped_note(self.dropped)


def dropped_note(dropped: int, kept_in: object = None) -> str | None:
    """The line saying that a command's output lost its first `dropped` bytes (None: nothing lost), and
    where its end was kept (`kept_in`: a file), if anywhere a user reads it."""
    if not dropped:
        return None
    where = f" in {kept_in}" if kept_in is not None else ""
    return f"the output was long: its first {dropped:,} bytes were dropped, its end kept{where}"


def as_shown(text: str) -> str:
    """`text` as a terminal shows it once written: a line rewritten after carriage returns (nsys's progress
    bars, a program's counter) is its last state only, each rewrite written over the one before it, column
    for column."""
    lines = []
    for line in text.split("\n"):
        shown = ""
        for part in line.split("\r"):
            shown = part + shown[len(part) :]
        lines.append(shown)
    return "\n".join(lines)


def python(module: str, *args: str) -> list[str]:
    """The command line of one of the harness's modules run as a child process: `python -P -m MODULE
    ARGS…`. -P keeps the working directory off sys.path, so that a folder there named like one of our
    packages (an `analysis/` of the user's, the clone's own folder) is not imported in place of the
    installed package."""
    return [sys.executable, "-P", "-m", module, *args]


def command(argv: Sequence[str], cleanup: Sequence[Path] = ()) -> list[str]:
    folders = [a for d in cleanup for a in ("--cleanup", str(d))]
    return python("harness.execution.supervisor", *folders, "--", *argv)


def run(
    argv: Sequence[str],
    *,
    cleanup: Sequence[Path] = (),
    env: dict[str, str] | None = None,
    merge_stderr: bool = False,
    watch: Callable[[], bool] | None = None,
    hold: Callable[[int, str, list[tuple[str, str]]], bool] | None = None,
    kept: int = KEPT_BYTES,
) -> Finished:
    """Run `argv` under a supervisor and wait for it, passing Ctrl-C (and SIGTERM, see harness.core.signals)
    on.

    An interruption does not raise: the command is told, finishes, and `interrupted` says which signal.
    `watch` is asked every POLL_S; once it says True the command gets SIGTERM
    (harness.execution.ranks.multirank: hung rank). `hold` is asked at the first signal, with the signal, the
    command's output so far and the (name, state) of the processes under it: True keeps the signal from it,
    which is let finish (nsys writing its report deletes it when told to stop), and `held` says so; a later
    signal is passed on (and `held` is then False). Of the output, the last `kept` bytes of each stream
    are kept (from a line's start; of a long line, its end), in memory and on disk; `dropped` counts the rest.
    """
    full_env = dict(os.environ if env is None else env)
    full_env[PARENT_ENV] = str(os.getpid())
    interrupted: int | None = None
    held = False
    import tempfile

    # files, not pipes: a harness killed with a pipe's read end would kill the writers with SIGPIPE.
    # Ctrl-C and SIGTERM are taken as they come (signals.deferred), never raised: a KeyboardInterrupt
    # raised inside Popen.wait, between its taking and its freeing of the lock it reaps the child under,
    # left that lock taken, and every later wait saw a process still running: the harness waited forever
    # on a worker that had ended. One held by a block around this call (a loop of runs, which stores each
    # run before it acts on a signal) is taken over: passed on as if it came now.
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        signals.deferred(take_over=True) as came,
    ):
        proc = subprocess.Popen(
            command(argv, cleanup),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out if merge_stderr else err,
            env=full_env,
            start_new_session=True,
        )
        stopped = False
        freed = {out: 0, err: 0}  # bytes at the start of each file already freed
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL_S)
                break
            for f in freed:
                freed[f] = _trim(f, kept, freed[f])
            if watch is not None and not stopped and watch():
                stopped = True
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            while came:  # a second one makes the supervisor kill everything
                sig = came.pop(0)
                if (
                    interrupted is None
                    and hold is not None
                    and hold(sig, _written(out, kept), _under(proc.pid))
                ):
                    interrupted, held = sig, True
                    continue
                interrupted, held = interrupted or sig, False  # passed on: the command is stopped after all
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
        if came:  # it came as the command ended: the command ended on its own, the run was interrupted
            interrupted = interrupted or came[0]
            came.clear()
        (stdout, out_dropped), (stderr, err_dropped) = _kept(out, kept), _kept(err, kept)
        return Finished(
            returncode=proc.returncode,
            stdout=stdout,
            stderr=stderr,
            interrupted=interrupted,
            held=held,
            dropped=out_dropped + err_dropped,
        )


def _under(pid: int) -> list[tuple[str, str]]:
    return [(name, state) for _, state, name in tree(pid)]


def _written(out: IO[bytes], kept: int = KEPT_BYTES) -> str:
    """The end of what the command has written to `out` so far (its last `kept` bytes, from the first whole
    line in them), read without moving the file's offset (the command shares it: a seek would make it write
    over its own output)."""
    return _kept(out, kept)[0]


def _kept(out: IO[bytes], kept: int) -> tuple[str, int]:
    """`_written`, and how many bytes before it the command wrote. A line that began before the last `kept`
    bytes is left out where the next begins in the first half of them; a longer one (a program's result
    printed as one line, with nsys's lines after it) keeps its end."""
    fd = out.fileno()
    size = os.fstat(fd).st_size
    start = max(0, size - kept)
    data = os.pread(fd, size - start, start)
    if start > 0:  # cut inside a line (or a character): begin at the next whole one, where it is near
        line = data.find(b"\n")
        if 0 <= line < len(data) // 2:
            data = data[line + 1 :]
        else:  # a line longer than half of what is kept: its end, from the next whole character
            data = data[next((i for i, b in enumerate(data[:4]) if not 0x80 <= b < 0xC0), 0) :]
    return data.decode(errors="replace"), size - len(data)


def _trim(out: IO[bytes], kept: int, freed: int) -> int:
    """Once `out` holds twice `kept` bytes past those `freed` already, free the whole blocks before its last
    `kept` (a hole punched: the file keeps its size, the command writes on at its offset, reads of the end
    are unchanged); how many bytes at its start are freed now. Where holes cannot be punched (a file system
    or a system without them), nothing is freed."""
    size = os.fstat(out.fileno()).st_size
    end = (size - kept) // BLOCK * BLOCK
    if size - freed <= 2 * kept or end <= freed:
        return freed
    return end if _punch(out.fileno(), freed, end - freed) else freed


def _punch(fd: int, offset: int, length: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    return libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) == 0


# --- the supervisor's side ------------------------------------------------------------------------------


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def _processes() -> dict[int, tuple[int, str, str, int]]:
    """pid -> (parent pid, state, name, CPU time in clock ticks: user and system, all its threads) of every
    process, from /proc (empty where there is no /proc)."""
    table: dict[int, tuple[int, str, str, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            name, fields = stat.partition(b"(")[2].rpartition(b")")[::2]  # the name may hold spaces, ")"
            fields = fields.split()
            cpu = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
            table[int(entry.name)] = (int(fields[1]), fields[0].decode(), name.decode(errors="replace"), cpu)
    return table


def tree(pid: int) -> list[tuple[int, str, str]]:
    """(pid, state, name) of every descendant of `pid`, zombies ("Z") too: a daemon COMMAND started is among
    them, the supervisor being a subreaper."""
    return [(p, state, name) for p, (_, state, name, _) in _tree(pid).items()]


def _tree(pid: int) -> dict[int, tuple[int, str, str, int]]:
    table = _processes()
    children: dict[int, list[int]] = {}
    for p, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(p)
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            found[child] = table[child]
    return found


def descendants(pid: int) -> list[int]:
    """Living descendants of `pid` (zombies left out)."""
    return [p for p, state, _ in tree(pid) if state != "Z"]


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


class _Wake(Exception):
    """Raised by the signal handler to get out of a blocking waitpid."""


class _Grace:
    """The time the processes under `root` are given after SIGTERM: it is over once they have done no work
    for GRACE_S (CPU time of less than IDLE_SHARE of one CPU over it, summed over them all), or CAP_S after
    it began. Where /proc cannot be read no work is seen: it is over GRACE_S after it began."""

    def __init__(self, root: int, now: float) -> None:
        self.root, self.began, self.worked, self.looked = root, now, now, now
        self.ticks = {pid: cpu for pid, (*_, cpu) in _tree(root).items()}  # work before it does not count
        self.work = 0  # clock ticks since `worked`
        ticks_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.enough = max(1.0, IDLE_SHARE * GRACE_S * ticks_s)

    def over(self, now: float) -> bool:
        if now - self.looked >= min(SAMPLE_S, GRACE_S / 4):
            self.looked, seen = now, {pid: cpu for pid, (*_, cpu) in _tree(self.root).items()}
            for pid, cpu in seen.items():  # a new process: all its time; an exited one: what it had is kept
                before = self.ticks.get(pid, 0)
                self.work += cpu - before if cpu >= before else cpu
            self.ticks = seen
            if self.work >= self.enough:
                self.worked, self.work = now, 0
        return now - self.worked >= GRACE_S or now - self.began >= CAP_S


class _Supervisor:
    def __init__(self, argv: list[str], cleanup: list[Path], parent: int) -> None:
        self.argv, self.cleanup, self.parent = argv, cleanup, parent
        self.pending: list[tuple[int, float]] = []  # signal, when it came
        self.passed: int | None = None
        self.grace: _Grace | None = None  # running after a SIGTERM
        self.kill = False  # a second signal: everything is killed
        self.echo_until = 0.0  # a SIGTERM before then is no second one (ECHO_S)
        self.parent_gone = False
        self.waiting = False  # in waitpid: a signal handler raises _Wake to get out

    def on_signal(self, signum: int, frame: object) -> None:
        self.pending.append((signum, time.monotonic()))
        if self.waiting:
            raise _Wake()

    def wait(self, child: subprocess.Popen[bytes]) -> None:
        """Until COMMAND exits: blocked in waitpid (a signal wakes it), polling only where it must."""
        blocking = sys.platform.startswith("linux")  # elsewhere, only polling sees the parent go
        while True:
            try:
                timeout = None if blocking and self.grace is None and not self.kill else POLL_S
                # only a blocking wait is woken by raising: a timed one ends by itself, and a _Wake raised
                # inside it between its taking and freeing of the lock it reaps under left that lock taken
                # (the child never reaped, the wait endless)
                self.waiting = timeout is None
                try:
                    if not self.pending:
                        child.wait(timeout)
                finally:
                    self.waiting = False
            except (_Wake, subprocess.TimeoutExpired):
                pass
            self.check(child)
            if child.poll() is not None:
                return

    def check(self, child: subprocess.Popen[bytes] | None) -> None:
        """Act on signals that came, on the parent's death and on the grace's end."""
        now = time.monotonic()
        if not self.parent_gone and os.getppid() != self.parent:
            self.parent_gone = True
            self.pending.append((signal.SIGTERM, now))
            self.echo_until = now + ECHO_S  # the kernel's SIGTERM for it: the harness gone insists on nothing
        while self.pending:
            came, at = self.pending.pop(0)
            sig = signal.SIGINT if came == signal.SIGINT else signal.SIGTERM
            if self.passed is None or (sig == signal.SIGTERM and self.passed == signal.SIGINT):
                self.passed = sig
                if child is not None and child.poll() is None:
                    child.send_signal(sig)
                if sig == signal.SIGTERM:
                    self.grace = _Grace(os.getpid(), now)
                    self.echo_until = max(self.echo_until, at + ECHO_S)
            elif sig == signal.SIGINT or at >= self.echo_until:  # Ctrl-C twice, SIGTERM again: stop waiting
                self.kill = True
        if self.kill or (self.grace is not None and self.grace.over(now)):
            self.kill = True
            _signal_all(descendants(os.getpid()), signal.SIGKILL)

    def end_leftovers(self) -> None:
        """What COMMAND started and left: a moment to exit by itself, then SIGTERM and the grace a SIGTERM
        gives COMMAND (the one running, if one is), then SIGKILL: nsys told to stop passes the signal to its
        program and exits without waiting for it, so a worker may still be writing its result here. What
        exits on SIGTERM (nsys's agent) is gone at once; a second signal still kills everything."""
        me = os.getpid()
        for sig, wait in ((None, LEFTOVER_WAIT_S), (signal.SIGTERM, CAP_S), (signal.SIGKILL, 1.0)):
            left = descendants(me)
            if not left:
                return
            if sig is not None:
                _signal_all(left, sig)
            if sig == signal.SIGTERM and self.grace is None:
                self.grace = _Grace(me, time.monotonic())
            end = time.monotonic() + wait
            while time.monotonic() < end and descendants(me) and (sig != signal.SIGTERM or not self.kill):
                _reap()
                self.check(None)
                time.sleep(POLL_S)

    def main(self) -> int:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if sig == signal.SIGTERM or not signals.ignored(sig):
                signal.signal(sig, self.on_signal)
        self.check(None)  # the parent may have died before PR_SET_PDEATHSIG took hold
        if self.parent_gone:
            self.remove_folders()
            return -signal.SIGTERM
        env = {**os.environ, signals.IGNORED_ENV: signals.ignored_here()}
        blocked = {sig for sig in (signal.SIGINT,) if signals.ignored(sig)}
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            child = subprocess.Popen(self.argv, env=env)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        self.wait(child)
        self.end_leftovers()
        _reap()
        self.check(None)
        if self.parent_gone:
            self.remove_folders()
        return child.returncode

    def remove_folders(self) -> None:
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def _exit_like(returncode: int) -> None:
    """Exit with COMMAND's code, or die of COMMAND's signal, so the harness sees what COMMAND did."""
    if returncode >= 0:
        sys.exit(returncode)
    sig = -returncode
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their default anyway
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    sys.exit(128 + sig)


def main(args: list[str]) -> None:
    split = args.index("--")
    options, argv = args[:split], args[split + 1 :]
    cleanup = [Path(options[i + 1]) for i, a in enumerate(options) if a == "--cleanup"]
    parent = int(os.environ.pop(PARENT_ENV, "0") or 0) or os.getppid()
    _exit_like(_Supervisor(argv, cleanup, parent).main())


if __name__ == "__main__":
    main(sys.argv[1:])
