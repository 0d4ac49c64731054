"""Real processes for the kill, lock and Ctrl-C tests: start them, find what they leave, count their steps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARK = "HARNESS_TEST_MARK"


def default_sigint() -> None:
    # a shell's background job starts with SIGINT ignored, and Python then never raises KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ignore_sigint() -> None:
    # as a shell that is not interactive starts a background job, and as `nohup` does
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start(
    args: list[str], cwd: Path, mark: str, sigint: Callable[[], None] = default_sigint, **env: str
) -> subprocess.Popen[bytes]:
    """`python -m harness ARGS` in a session of its own (like a terminal's foreground job), output to files;
    it and everything it starts carry `mark` in their environment. `sigint` sets SIGINT up in it before it
    starts (`ignore_sigint`: a background job)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), MARK: mark, **env}
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=full,
        stdin=subprocess.DEVNULL,
        stdout=(cwd / "stdout.txt").open("wb"),
        stderr=(cwd / "stderr.txt").open("wb"),
        start_new_session=True,
        preexec_fn=sigint,
    )


def output(cwd: Path) -> str:
    return (cwd / "stdout.txt").read_text() + (cwd / "stderr.txt").read_text()


def ignores(pid: int, sig: int) -> bool:
    """Whether process `pid` ignores `sig` (its SigIgn in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigIgn in /proc/{pid}/status")


def marked(mark: str) -> list[str]:
    """Processes still running with `mark` in their environment: 'pid command'."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(f"{entry.name} {cmd[:160]}")
    return found


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def logged_steps(tmp: Path) -> int:
    """Steps the workers under TMPDIR=tmp have finished so far, all ranks together (harness.execution.worker
    logs each one)."""
    total = 0
    for log in tmp.glob("harness-*/result*.json.steps.jsonl"):  # result.rank<R>.json…: a rank's
        try:
            total += len(log.read_text().splitlines())
        except OSError:
            continue
    return total


FIXED_PHASES = """\
import contextlib, json, os, pathlib
argv = pathlib.Path('/proc/self/cmdline').read_bytes().split(b'\\0')
argv = argv[argv.index(b'-m'):] if b'-m' in argv[1:3] else []  # python [-P] -m MODULE ARGS
if argv[1:2] and argv[1] in (b'harness.execution.worker', b'harness.profilers.torch_hook'):
    status = pathlib.Path('/proc/self/status').read_text().splitlines()
    ppid = next(line.split()[1] for line in status if line.startswith('PPid:'))
    parent = os.path.basename(pathlib.Path(f'/proc/{ppid}/cmdline').read_bytes().split(b'\\0')[0])
    spec = json.loads(pathlib.Path(os.fsdecode(argv[2])).read_text())
    ns = PROFILED_NS if parent.startswith(b'nsys') or 'profiler' in spec else BASELINE_NS
    from harness.execution import timing

    real = timing.PhaseClock.phase

    @contextlib.contextmanager
    def phase(self, name, step):
        with real(self, name, step):
            yield
        self.durations[name] = ns

    timing.PhaseClock.phase = phase
"""


def fixed_phase_times(folder: Path, baseline_ns: int, profiled_ns: int) -> str:
    """A PYTHONPATH entry whose sitecustomize makes every phase of a harness worker measure `baseline_ns`,
    or `profiled_ns` when a profiler watches the worker (its parent is nsys's launcher, or its config starts
    torch.profiler): samples whose overhead is known, for an exact verdict. The worker still runs its steps
    (and NVTX ranges) for real; only the durations it reports are replaced."""
    folder.mkdir(parents=True, exist_ok=True)
    values = f"BASELINE_NS, PROFILED_NS = {baseline_ns}, {profiled_ns}\n"
    (folder / "sitecustomize.py").write_text(values + FIXED_PHASES)
    return str(folder)


SLOW_TO_FINISH = """\
import os, pathlib, time
argv = pathlib.Path('/proc/self/cmdline').read_bytes().split(b'\\0')
if b'harness.execution.worker' in argv:
    from harness.execution import runner, supervisor


    def _state(pid):
        try:
            stat = pathlib.Path(f'/proc/{pid}/stat').read_text()
        except OSError:
            return None
        comm, rest = stat.split('(', 1)[1].rsplit(')', 1)
        return comm, rest.split()[0], int(rest.split()[1])


    def _nsys_above():
        pid = os.getpid()
        while pid > 1 and (seen := _state(pid)) is not None:
            if seen[0] == 'nsys':
                return pid
            pid = seen[2]
        return None


    NSYS = _nsys_above()
    real = runner.record_dynamo


    def finishing(result, before):
        if result.status == 'interrupted' and NSYS is not None:
            end = time.monotonic() + 300
            while (seen := _state(NSYS)) is not None and seen[1] != 'Z' and time.monotonic() < end:
                time.sleep(0.05)
            if seen is None or seen[1] == 'Z':
                pathlib.Path(os.environ['HARNESS_TEST_FINISHED']).write_text('after nsys exited')
                # past the moment the supervisor used to send what nsys left SIGTERM, and then SIGKILL
                time.sleep(2 * supervisor.LEFTOVER_WAIT_S + 2)
        return real(result, before)


    runner.record_dynamo = finishing
"""


def slow_to_finish(folder: Path, said: Path) -> dict[str, str]:
    """The environment for `start` in which a harness worker under nsys, once interrupted, finishes only
    after nsys has exited, and then later than the supervisor used to wait for what nsys left behind: how
    a worker finishes on a loaded machine, nsys told to stop passing the signal on and exiting without
    waiting for its program. A sitecustomize in `folder` does it; the worker writes 'after nsys exited' to
    `said` as nsys has, before it finishes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SLOW_TO_FINISH)
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(REPO)]), "HARNESS_TEST_FINISHED": str(said)}
