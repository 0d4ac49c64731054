"""Signals after the capture: while nsys writes its report (its importer running), and while the harness reads
the export. nsys 2023.4 told to stop while it writes its report deletes the .qdstrm and the half-written
report: the signal is held, the report let finish, and the run stored `interrupted` with the files kept,
exit 130 for SIGINT and 143 for SIGTERM. A stand-in nsys plays that end of a capture; tests/test_profile.py
does it with the real nsys.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from procs import wait_until
from reading import flat
from test_store import make_result
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import NsysError
from harness.core.signals import sigterm_raises
from harness.execution import nsys
from harness.store.results import ResultsStore

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
IDS = ["ctrl-c", "sigterm"]


STAGES = ["launcher-exited", "importer-running", "generating-said"]


def writing_nsys(folder: Path, stage: str) -> Path:
    """A stand-in nsys 2023.4 at the end of a capture: the program has printed its line and ended, and
    nsys is on its way to the report, as `stage` shows it: its launcher (the program's parent) has exited
    and is left a zombie, its importer runs (a process named QdstrmImporter), or it has printed "Generating
    '…qdstrm'" (the real one says it late). Told to stop now, it deletes what it was writing, as nsys 2023.4
    does; else it writes the report and the export once the test says so (folder/finish)."""
    folder.mkdir(parents=True, exist_ok=True)
    sleeper = shutil.which("sleep")
    assert sleeper is not None
    shutil.copy(sleeper, folder / "QdstrmImporter")
    fake = folder / "nsys"
    fake.write_text(
        f"""#!{sys.executable}
import ctypes, os, pathlib, signal, subprocess, sys, time
folder, stage, args = pathlib.Path({str(folder)!r}), {stage!r}, sys.argv[1:]
if args[:1] == ["--version"]:
    sys.exit(print("NVIDIA Nsight Systems version 2023.4.4.54-1"))
if args[:2] == ["profile", "--help"]:
    sys.exit(print("\\t--output=\\n\\t--force-overwrite=\\n\\t--export=\\n\\t--trace="))
out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
rep, sqlite = pathlib.Path(out + ".nsys-rep"), pathlib.Path(out + ".sqlite")
print("the program's last line", flush=True)
importer = None
if stage == "launcher-exited" and (launcher := os.fork()) == 0:
    ctypes.CDLL(None).prctl(15, b"nsys-launcher", 0, 0, 0)  # PR_SET_NAME; never waited for: a zombie
    os._exit(0)
if stage == "launcher-exited":  # on a loaded machine the child may not have run yet: the stage is a zombie
    stat = pathlib.Path(f"/proc/{{launcher}}/stat")
    while stat.read_text().rsplit(") ", 1)[1][0] != "Z":
        time.sleep(0.01)
if stage == "importer-running":
    importer = subprocess.Popen([str(folder / "QdstrmImporter"), "300"])
if stage == "generating-said":
    print(f"Generating '{{folder}}/nsys-report-1.qdstrm'", flush=True)


def stop(signum, frame):
    importer and importer.kill()
    for path in (rep, sqlite, folder / "running"):
        path.unlink(missing_ok=True)
    sys.exit(0)


signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
rep.write_bytes(b"")
(folder / "running").touch()
while not (folder / "finish").exists():
    time.sleep(0.05)
importer and importer.kill()
rep.write_text("report\\n")
sqlite.write_text("export\\n")
print(f"Generated:\\n    {{rep}}\\n    {{sqlite}}")
"""
    )
    fake.chmod(0o755)
    return fake


def signal_then_finish(folder: Path, sig: int, held: threading.Event) -> threading.Thread:
    """In the background: once the stand-in writes its report, `sig` to this process; then, once the
    harness has said it holds the signal (or the stand-in was stopped by it), let the stand-in finish."""

    def act() -> None:
        wait_until(lambda: (folder / "running").exists(), 60, "the stand-in nsys to write its report")
        os.kill(os.getpid(), sig)
        wait_until(lambda: held.is_set() or not (folder / "running").exists(), 60, "the signal to be taken")
        (folder / "finish").touch()

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("sigint_raises")
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=IDS)
def test_a_signal_while_nsys_writes_its_report_lets_it_finish(
    tmp_path: Path, sig: int, code: int, stage: str
) -> None:
    fake = writing_nsys(tmp_path / "nsys", stage)
    info = nsys.NsysInfo(path=fake, version="2023.4.4.54", flags=frozenset({"output"}), source="t")
    held = threading.Event()
    said: list[str] = []

    def progress(text: str) -> None:
        said.append(text)
        held.set()

    opts = nsys.ProfileOptions(output=tmp_path / "out" / "run")
    thread = signal_then_finish(tmp_path / "nsys", sig, held)
    with sigterm_raises():
        prof = telling(nsys.profile, progress)(info, opts, ["true"])
    thread.join(60)
    name = signal.Signals(sig).name
    assert prof.interrupted == sig and prof.held
    assert prof.rep == tmp_path / "out" / "run.nsys-rep" and prof.rep.read_text() == "report\n"
    assert prof.sqlite == tmp_path / "out" / "run.sqlite" and prof.sqlite.read_text() == "export\n"
    assert prof.notes == [f"interrupted ({name}) while the report was written: it was let finish"]
    assert said == [
        f"{name} while nsys writes its report: letting it finish (a second signal stops nsys, which then "
        "deletes the report)"
    ]


@pytest.fixture
def finished_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's result as if it had run all its steps under the stand-in nsys (which runs no program)."""
    import harness.profilers.nsys as profiler

    def read(config: Any, run_id: str, *args: Any, **how: Any) -> Any:
        result = make_result(run_id)
        result.config = config
        return result

    monkeypatch.setattr(profiler, "read_worker_result", read)


def telling(profile: Callable[..., Any], told: Callable[[str], None]) -> Callable[..., Any]:
    """`profile` with `told` as its `progress` too (passed on to the caller's), where it takes one."""
    if "progress" not in inspect.signature(profile).parameters:
        return profile

    def call(*args: Any, progress: Callable[[str], None] | None = None, **kwargs: Any) -> Any:
        def both(text: str) -> None:
            told(text)
            if progress is not None:
                progress(text)

        return profile(*args, progress=both, **kwargs)

    return call


def held_said(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when nsys.profile tells its caller it holds a signal (the run's progress, passed on)."""
    event = threading.Event()
    monkeypatch.setattr(nsys, "profile", telling(nsys.profile, lambda text: event.set()))
    return event


RUN = ["run", "tiny", "--device", "cpu", "--steps", "3", "--warmup", "2", "--nsys", "--no-nsys-baseline"]


@pytest.mark.usefixtures("sigint_raises", "finished_worker")
@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=IDS)
def test_run_interrupted_while_nsys_writes_its_report_is_stored_with_it(
    tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    """`harness run --nsys` with its signal held: the report and export kept, the run stored `interrupted`
    with them and its steps, one line saying so, the exit code of the signal (it was stored `ok`, exit 1,
    "nsys wrote no SQLite export; files kept: none")."""
    fake = writing_nsys(tmp_path / "nsys", "importer-running")
    monkeypatch.setenv("HARNESS_NSYS", str(fake))
    held = held_said(monkeypatch)
    thread = signal_then_finish(tmp_path / "nsys", sig, held)
    result = CliRunner().invoke(app, [*RUN, "--profile-dir", str(tmp_path / "profiles")])
    thread.join(60)
    assert result.exit_code == code, result.output
    (run,) = ResultsStore(tmp_db, readonly=True).runs().to_dict("records")
    assert run["status"] == "interrupted"
    rep, sqlite = Path(run["nsys_rep"]), Path(run["nsys_sqlite"])
    assert (rep.read_text(), sqlite.read_text()) == ("report\n", "export\n")
    assert len(ResultsStore(tmp_db, readonly=True).step_timings([run["run_id"]])) == 15
    name = signal.Signals(sig).name
    line = (
        f"error: run {run['run_id']} interrupted by {name} while nsys wrote its report, after all 3 measured "
        f"steps; stored as interrupted; files kept: {rep}, {sqlite}"
    )
    assert line in flat(result.stderr)
    assert "Traceback" not in result.output


def quick_nsys(folder: Path) -> Path:
    """A stand-in nsys whose capture ends at once with its report and export written."""
    fake = writing_nsys(folder, "generating-said")
    (folder / "finish").touch()
    return fake


@pytest.mark.usefixtures("finished_worker")
@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=IDS)
def test_a_signal_while_the_export_is_read_is_said_and_stored(
    tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    """The signal arrives as the export is opened after the capture (the reading raises as the signal
    would): one line saying what was kept, the run stored `interrupted`, 143 for SIGTERM (it was 130 for
    both, and silent)."""
    import harness.profilers.capture as examining
    from harness.core.signals import Terminated

    monkeypatch.setenv("HARNESS_NSYS", str(quick_nsys(tmp_path / "nsys")))

    def reading(path: Path, *args: Any, **kwargs: Any) -> Any:
        raise Terminated() if sig == signal.SIGTERM else KeyboardInterrupt()

    monkeypatch.setattr(examining, "examine", reading)
    result = CliRunner().invoke(app, [*RUN, "--profile-dir", str(tmp_path / "profiles")])
    assert result.exit_code == code, result.output
    (run,) = ResultsStore(tmp_db, readonly=True).runs().to_dict("records")
    assert run["status"] == "interrupted"
    name = signal.Signals(sig).name
    line = (
        f"error: run {run['run_id']} interrupted by {name} while its export was read; stored as interrupted; "
        f"files kept: {run['nsys_rep']}, {run['nsys_sqlite']}"
    )
    assert line in flat(result.stderr)
    shown = json.loads(CliRunner().invoke(app, ["show", run["run_id"], "--format", "json"]).stdout)
    assert shown["run"]["status"] == f"interrupted (interrupted by {name} while its export was read)"


def test_a_program_whose_report_was_held_is_said_to_have_ended() -> None:
    """`profile -- CMD` interrupted while nsys wrote its report: the program ran to its end."""
    from harness.experiments.program import program_result

    prof = nsys.ProfileResult(0, None, None, None, "", interrupted=signal.SIGTERM, held=True)
    result = program_result("p-1", "p", ["p"], prof, "2023.4.4.54")
    assert (result.status, result.error) == (
        "interrupted",
        "interrupted by SIGTERM while nsys wrote its report, after the program ended",
    )


# --- the harness's own import, where nsys left only a .qdstrm ----------------------------------------------


def stand_in_importer(folder: Path) -> nsys.NsysInfo:
    """An nsys whose QdstrmImporter (host-linux-x64 beside it) writes part of the report, then the rest once
    the test says so (folder/finish); stopped by a signal it exits 1, leaving the part written."""
    (folder / "bin").mkdir(parents=True)
    (folder / "host-linux-x64").mkdir()
    importer = folder / "host-linux-x64" / "QdstrmImporter"
    importer.write_text(
        f"""#!{sys.executable}
import pathlib, signal, sys, time
folder, args = pathlib.Path({str(folder)!r}), sys.argv[1:]
rep = pathlib.Path(args[args.index("--output-file") + 1])


def stop(*_):
    (folder / "running").unlink()
    sys.exit(1)


signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
rep.write_text("part of a report")
(folder / "running").touch()
while not (folder / "finish").exists():
    time.sleep(0.05)
rep.write_text("report\\n")
"""
    )
    importer.chmod(0o755)
    fake = folder / "bin" / "nsys"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    return nsys.NsysInfo(path=fake, version="2023.4.4.54", flags=frozenset(), source="t")


def hold_seen(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once the supervisor has asked whether to hold a signal (and the answer is given)."""
    from harness.execution import supervisor

    event = threading.Event()
    real = supervisor.run

    def run(*args: Any, hold: Callable[..., bool] | None = None, **kwargs: Any) -> Any:
        def asked(*given: Any) -> bool:
            answer = hold(*given) if hold is not None else False
            event.set()
            return answer

        return real(*args, hold=asked if hold is not None else None, **kwargs)

    monkeypatch.setattr(supervisor, "run", run)
    return event


@pytest.mark.usefixtures("sigint_raises")
@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=IDS)
def test_the_harness_import_lets_its_first_signal_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    info = stand_in_importer(tmp_path / "nsys")
    held = hold_seen(monkeypatch)
    qdstrm = tmp_path / "run.qdstrm"
    qdstrm.write_text("stream")
    seen: list[int] = []
    thread = signal_then_finish(tmp_path / "nsys", sig, held)
    with sigterm_raises():
        rep = nsys.import_qdstrm(qdstrm, tmp_path / "run.nsys-rep", info, seen)
    thread.join(60)
    assert (rep.read_text(), seen, qdstrm.read_text()) == ("report\n", [sig], "stream")


@pytest.mark.usefixtures("sigint_raises")
def test_a_signal_after_the_first_stops_the_import_and_leaves_no_half_report(tmp_path: Path) -> None:
    info = stand_in_importer(tmp_path / "nsys")
    qdstrm = tmp_path / "run.qdstrm"
    qdstrm.write_text("stream")
    seen = [int(signal.SIGINT)]  # the run was stopped by Ctrl-C already
    thread = signal_then_finish(tmp_path / "nsys", signal.SIGTERM, threading.Event())
    with sigterm_raises(), pytest.raises(NsysError) as e:
        nsys.import_qdstrm(qdstrm, tmp_path / "run.nsys-rep", info, seen)
    thread.join(60)
    said = f"QdstrmImporter importing {qdstrm} was stopped by SIGTERM: run.nsys-rep not written"
    assert str(e.value) == said
    assert seen == [signal.SIGINT, signal.SIGTERM] and not (tmp_path / "run.nsys-rep").exists()
    assert qdstrm.read_text() == "stream"


@pytest.mark.usefixtures("sigint_raises")
def test_a_second_signal_stops_nsys_and_it_is_said_truthfully(tmp_path: Path) -> None:
    """Ctrl-C twice while nsys writes its report: the second is passed on, nsys deletes the report, and the
    note says no report was written (not that it was let finish)."""
    folder = tmp_path / "nsys"
    fake = writing_nsys(folder, "importer-running")
    info = nsys.NsysInfo(path=fake, version="2023.4.4.54", flags=frozenset({"output"}), source="t")
    held = threading.Event()

    def twice() -> None:
        wait_until(lambda: (folder / "running").exists(), 60, "the stand-in nsys to write its report")
        os.kill(os.getpid(), signal.SIGINT)
        wait_until(held.is_set, 60, "the first signal to be held")
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=twice, daemon=True)
    thread.start()
    prof = telling(nsys.profile, lambda text: held.set())(
        info, nsys.ProfileOptions(output=tmp_path / "run"), ["x"]
    )
    thread.join(60)
    assert (prof.interrupted, prof.held, prof.rep, prof.sqlite) == (signal.SIGINT, False, None, None)
    assert prof.notes == ["interrupted (SIGINT): nsys was stopped part way and wrote no report"]


@pytest.mark.usefixtures("finished_worker")
@pytest.mark.parametrize("held", [True, False], ids=["held", "while-recording"])
def test_a_run_whose_steps_all_ended_says_when_the_signal_came(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """A run under nsys that timed all its steps while a signal stopped nsys: said to be interrupted while
    nsys wrote its report only where the signal was held after the program ended. A signal that came while
    nsys recorded (nsys stops recording then; a short step finishes before the program hears of it) was
    said the same, over a capture that ends before the steps did."""
    import harness.profilers.nsys as profiler
    from harness.core.records import RunConfig
    from harness.execution.nsys import NsysInfo

    prof = nsys.ProfileResult(0, None, None, None, "", interrupted=signal.SIGINT, held=held)
    monkeypatch.setattr(nsys, "profile", lambda *args, **kwargs: prof)
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.4.54", flags=frozenset(), source="t")
    options = profiler.NsysOptions(profile_dir=tmp_path)
    result, _, _ = profiler.launch(RunConfig("tiny", device="cpu"), options, info, "tiny-1")
    assert result.status == "interrupted"
    steps = "all 3 measured steps"  # make_result's
    assert result.error == (
        f"interrupted by SIGINT while nsys wrote its report, after {steps}"
        if held
        else f"interrupted by SIGINT while nsys recorded (its capture ends there), with {steps} timed"
    )


def stopped_by_nsys(config: Any, run_id: str, *args: Any, **how: Any) -> Any:
    """The worker's result of a run whose program nsys ended (SIGTERM) before its first measured step."""
    result = make_result(run_id)
    result.config, result.steps = config, []
    result.status, result.error = "interrupted", "interrupted by SIGTERM after 0 of 3 measured steps"
    return result


@pytest.mark.parametrize("args", [["--duration=1"], ["-d", "1"]])
def test_a_run_ended_by_nsys_duration_is_not_said_stopped_by_a_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """--nsys-arg=--duration: nsys ends the program with SIGTERM when it runs out, and the worker stores
    itself interrupted. No signal came to the harness: the run failed on its own options (exit 1), said so
    with what lets it go on; it was 'interrupted by SIGTERM', exit 143, as if the user had stopped it."""
    import harness.profilers.nsys as profiler
    from harness.core.records import RunConfig
    from harness.execution.nsys import NsysInfo

    monkeypatch.setattr(profiler, "read_worker_result", stopped_by_nsys)
    prof = nsys.ProfileResult(143, None, None, None, "")
    monkeypatch.setattr(nsys, "profile", lambda *a, **k: prof)
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.4.54", flags=frozenset(), source="t")
    options = profiler.NsysOptions(profile_dir=tmp_path, extra_args=args)
    result, _, _ = profiler.launch(RunConfig("tiny", device="cpu"), options, info, "tiny-1")
    given = " ".join(args)
    assert (result.status, result.error) == (
        "error",
        f"nsys ended the program when its {given} ran out, after 0 of 3 measured steps; "
        "--nsys-arg=--kill=none lets the run go on past the capture",
    )
    # a signal that came to the harness is still the user's, whatever --duration says
    monkeypatch.setattr(nsys, "profile", lambda *a, **k: replace(prof, interrupted=signal.SIGTERM))
    result, _, _ = profiler.launch(RunConfig("tiny", device="cpu"), options, info, "tiny-2")
    assert (result.status, result.error) == (
        "interrupted",
        "interrupted by SIGTERM after 0 of 3 measured steps",
    )


def test_ranks_ended_by_nsys_duration_are_said_so_as_one_process_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--nproc 2` under --nsys-arg=--duration: each rank's nsys ends its program with SIGTERM and each rank
    stores itself interrupted. The run was said 'interrupted by SIGTERM', exit 143, where one process
    ended so is said ended by nsys's duration."""
    import harness.profilers.nsys as profiler
    from harness.core.records import RunConfig
    from harness.execution.nsys import NsysInfo
    from harness.execution.ranks import multirank

    config = RunConfig("tiny", device="cpu", nproc=2)
    ranks = {rank: stopped_by_nsys(config, "tiny-1") for rank in (0, 1)}
    combined = multirank.combine(config, "tiny-1", multirank.Launched(ranks, 0, ""))
    assert combined.status == "interrupted"  # as the ranks' launch left it
    prof = nsys.ProfileResult(0, None, None, None, "")
    monkeypatch.setattr(profiler, "profile_ranks", lambda *a, **k: (replace(combined), prof, []))
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.4.54", flags=frozenset(), source="t")
    options = profiler.NsysOptions(profile_dir=tmp_path, extra_args=["--duration=1"])
    result, _, _ = profiler.launch(config, options, info, "tiny-1")
    assert (result.status, result.error) == (
        "error",
        "nsys ended the program when its --duration=1 ran out, after 0 of 3 measured steps; "
        "--nsys-arg=--kill=none lets the run go on past the capture",
    )
    # a signal that came to the harness is still the user's
    held = replace(prof, interrupted=signal.SIGTERM)
    monkeypatch.setattr(profiler, "profile_ranks", lambda *a, **k: (replace(combined), held, []))
    result, _, _ = profiler.launch(config, options, info, "tiny-1")
    assert (result.status, result.error) == (
        "interrupted",
        "interrupted by SIGTERM after 0 of 3 measured steps",
    )


def test_a_rank_failing_after_nsys_duration_ended_its_peer_is_said_after_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--nproc 2 under --duration: nsys ends rank 0, and rank 1 fails in its all-reduce (gloo: "Connection
    closed by peer"). The run read as rank 1's own failure; it says nsys's end first, the failure after."""
    import harness.profilers.nsys as profiler
    from harness.core.records import RunConfig
    from harness.execution.nsys import NsysInfo
    from harness.execution.ranks import multirank

    config = RunConfig("tiny", device="cpu", nproc=2)
    peer = make_result("tiny-1")
    peer.config, peer.steps = config, []
    peer.status, peer.error = "error", "RuntimeError: Connection closed by peer"
    launched = multirank.Launched(
        {0: stopped_by_nsys(config, "tiny-1"), 1: peer}, 1, "", None, 1, "rank 1: x"
    )
    combined = multirank.combine(config, "tiny-1", launched)
    prof = nsys.ProfileResult(0, None, None, None, "")
    monkeypatch.setattr(profiler, "profile_ranks", lambda *a, **k: (replace(combined), prof, []))
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.4.54", flags=frozenset(), source="t")
    options = profiler.NsysOptions(profile_dir=tmp_path, extra_args=["--duration=1"])
    result, _, _ = profiler.launch(config, options, info, "tiny-1")
    assert (result.status, result.error) == (
        "error",
        "nsys ended rank 0's program when its --duration=1 ran out, after 0 of 3 measured steps; rank 1 "
        "failed: RuntimeError: Connection closed by peer (a rank whose peer has ended fails in its "
        "collective); --nsys-arg=--kill=none lets the run go on past the capture",
    )
    without = profiler.NsysOptions(profile_dir=tmp_path)  # no --duration: rank 1's failure, as it was
    result, _, _ = profiler.launch(config, without, info, "tiny-1")
    assert (result.status, result.error) == ("error", "rank 1: x")


def test_run_ended_by_nsys_duration_says_it_once_and_exits_1(
    tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --nsys --nsys-arg=--duration=1` whose program nsys ended: one line, exit 1 (it was 143, and a
    run's one-line error was said twice, after `run failed:` and again below)."""
    import harness.profilers.nsys as profiler

    monkeypatch.setattr(profiler, "read_worker_result", stopped_by_nsys)
    monkeypatch.setenv("HARNESS_NSYS", str(quick_nsys(tmp_path / "nsys")))
    args = [*RUN, "--profile-dir", str(tmp_path / "profiles"), "--nsys-arg=--duration=1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    said = "nsys ended the program when its --duration=1 ran out, after 0 of 3 measured steps"
    assert flat(result.stderr).count(said) == 1, result.stderr
