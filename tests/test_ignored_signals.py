"""A harness started with SIGINT and SIGHUP ignored (`nohup harness run … &` from a script) keeps them
ignored through nsys and torchrun: a SIGINT or SIGHUP to the harness's process group, or straight to any
process under it (its supervisor, nsys and its agent, torchrun, the workers), stops nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
from procs import ignores, logged_steps, marked, output, start, wait_until

from harness.store.results import ResultsStore

IGNORED = (signal.SIGINT, signal.SIGHUP)
SHORT = ["--device", "cpu", "--steps", "4", "--warmup", "1", "-b", "1", "-t", "32"]


def nohup_background() -> None:
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)


def signal_everything_once_measuring(
    args: list[str], tmp_path: Path, steps: int, **env: str
) -> tuple[int, str]:
    """Start `harness ARGS` ignoring SIGINT and SIGHUP, wait for `steps` logged steps, check that the
    harness's own processes ignore both, send both to its process group and to every process under it,
    and wait for it: its exit code and output."""
    tmp, mark = tmp_path / "tmp", uuid.uuid4().hex
    tmp.mkdir()
    proc = start(args, tmp_path, mark, nohup_background, TMPDIR=str(tmp), **env)
    wait_until(lambda: logged_steps(tmp) >= steps, 300, "the run to measure a step")
    everything = [int(p.split()[0]) for p in marked(mark)]
    # the harness, its supervisor, torchrun, the workers; nsys takes SIGINT over, and is kept from it blocked
    own = [int(p.split()[0]) for p in marked(mark) if p.split()[1] == sys.executable and " -m harness" in p]
    assert {(pid, sig): ignores(pid, sig) for pid in own for sig in IGNORED} == {
        (pid, sig): True for pid in own for sig in IGNORED
    }
    for sig in IGNORED:
        os.killpg(proc.pid, sig)  # a Ctrl-C in the terminal, `kill -INT 0` in the script, a hang-up
        for pid in everything:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    code = proc.wait(600)
    said = output(tmp_path)
    assert marked(mark) == []
    return code, said


@pytest.mark.slow
@pytest.mark.nsys
def test_a_run_under_nsys_keeps_sigint_and_sighup_ignored(tmp_path: Path, nsys_bin: str) -> None:
    """nsys takes SIGINT over (told it, it stops the capture and the program with SIGTERM; its agent told
    it, the capture is lost and made again), and its launcher starts the program with SIGINT set back to
    its default: nsys gets SIGINT blocked, and the worker ignores it again."""
    db, profiles = tmp_path / "r.sqlite", tmp_path / "profiles"
    args = ["run", "tiny", *SHORT, "--nsys", "--no-nsys-baseline", "--profile-dir", str(profiles)]
    code, said = signal_everything_once_measuring(
        [*args, "--db", str(db)], tmp_path, 1, HARNESS_NSYS=nsys_bin
    )
    assert code == 0, said
    assert "Traceback" not in said and "interrupted" not in said and "captured once more" not in said
    store = ResultsStore(str(db), readonly=True)
    (run,) = store.runs().to_dict("records")
    assert run["status"] == "ok"
    assert set(store.step_timings()["step"]) == {0, 1, 2, 3, 4}  # warmup 0, measured 1 to 4
    rep, sqlite = Path(run["nsys_rep"]), Path(run["nsys_sqlite"])
    assert (rep.parent, rep.suffix, sqlite) == (profiles, ".nsys-rep", rep.with_suffix(".sqlite"))
    assert rep.is_file() and sqlite.is_file()


@pytest.mark.slow
def test_a_run_across_ranks_keeps_sigint_and_sighup_ignored(tmp_path: Path) -> None:
    """torchrun takes SIGINT and SIGHUP over unless told not to: both ranks would have been stopped."""
    db = tmp_path / "r.sqlite"
    code, said = signal_everything_once_measuring(
        ["run", "tiny", *SHORT, "--nproc", "2", "--db", str(db)], tmp_path, 2
    )
    assert code == 0, said
    assert "Traceback" not in said and "interrupted" not in said
    store = ResultsStore(str(db), readonly=True)
    (run,) = store.runs().to_dict("records")
    assert run["status"] == "ok"
    steps = store.step_timings().groupby("rank")["step"].agg(set).to_dict()
    assert steps == {0: {0, 1, 2, 3, 4}, 1: {0, 1, 2, 3, 4}}
