"""A Ctrl-C or SIGTERM that reaches the harness as a worker finishes its run: the worker ends on its own all
the same (it has written its result, and exiting takes it a second or more), the run is kept as it ended, and
the command stops after storing it, with the signal's exit code. `run --repeats`, `sweep` and `overhead`
went on with their next run, the signal lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core import signals
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution import supervisor, worker
from harness.store.results import ResultsStore

# the worker, then SIGTERM to the harness once the worker has written its result, after the worker numbered
# `after` only: the moment a `timeout` or a scheduler may pick
SIGNAL_AFTER = textwrap.dedent(
    """
    import os, pathlib, runpy, signal, sys
    folder, after, entry = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sys.argv = [entry, *sys.argv[4:]]
    try:
        runpy.run_module(entry, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code
    folder.mkdir(exist_ok=True)
    (folder / str(len(list(folder.iterdir())) + 1)).touch()
    if len(list(folder.iterdir())) == after:  # the harness: its supervisor's parent
        stat = pathlib.Path(f"/proc/{os.getppid()}/stat").read_text()
        os.kill(int(stat.rpartition(")")[2].split()[1]), signal.SIGTERM)
    sys.exit(code)
    """
)
STEP = {"forward": 100, "backward": 200, "optimizer": 50}
runner = CliRunner()
pytestmark = pytest.mark.attack(saves=True)


def signal_after(monkeypatch: pytest.MonkeyPatch, folder: Path, after: int) -> None:
    """Every worker run through SIGNAL_AFTER: SIGTERM to the harness as the `after`-th has finished."""

    def command(config_path: Path, result_path: Path, entry: str = worker.ENTRY) -> list[str]:
        return [sys.executable, "-P", "-c", SIGNAL_AFTER, str(folder), str(after), entry,
                str(config_path), str(result_path)]  # fmt: skip

    monkeypatch.setattr(worker, "worker_command", command)


def said(r) -> str:  # type: ignore[no-untyped-def]
    return " ".join(r.stderr.split())


@pytest.mark.slow
def test_run_repeats_stops_at_a_sigterm_that_came_as_its_worker_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --repeats 3` with SIGTERM as its first worker ended ok: it ran the other two and exited 0."""
    signal_after(monkeypatch, tmp_path / "ended", 1)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["run", "char", "--device", "cpu", "--repeats", "3", "--steps", "1", "--warmup", "0", "--db", db,
            "--format", "json"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 143, r.output
    assert len(list((tmp_path / "ended").iterdir())) == 1  # no run after it
    (runs, _) = json.loads(r.stdout).values()
    assert [row["status"] for row in runs] == ["ok"]  # it had finished: kept as it ended
    assert list(ResultsStore(db).runs()["status"]) == ["ok"]
    assert "run --repeats interrupted by SIGTERM between runs, after 1 of 3; the 1 run is stored" in said(r)


@pytest.mark.slow
def test_a_sweep_stops_at_a_sigterm_that_came_as_a_points_worker_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signal_after(monkeypatch, tmp_path / "ended", 1)
    db = f"sqlite:///{tmp_path}/s.sqlite"
    args = ["sweep", "--models", "char", "--batch-sizes", "1,2", "--device", "cpu", "--steps", "1",
            "--warmup", "0", "--db", db, "--format", "json"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 143, r.output
    assert [row["batch"] for row in json.loads(r.stdout)] == [1]
    assert list(ResultsStore(db).runs()["status"]) == ["ok"]
    assert "sweep interrupted by SIGTERM between points, after 1 of 2; the 1 run is stored" in said(r)


@pytest.mark.slow
@pytest.mark.parametrize("after", [1, 2])
def test_overhead_stops_at_a_sigterm_that_came_as_a_workers_run_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_db: str, after: int
) -> None:
    """After the baseline of round 1 (the round cut: one line, nothing to show) or after the run under
    torch.profiler that ends it (the round whole: its table)."""
    monkeypatch.chdir(tmp_path)
    signal_after(monkeypatch, tmp_path / "ended", after)
    args = ["overhead", "char", "--device", "cpu", "--profiler", "torch", "--repeats", "2", "--steps", "1",
            "--warmup", "0", "--format", "json"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 143, r.output
    assert len(list((tmp_path / "ended").iterdir())) == after  # no run after it
    stored = ResultsStore(tmp_db).runs()
    assert list(stored["status"]) == ["ok"] * after
    (experiment,) = set(stored["experiment"])
    if after == 1:
        (run_id,) = stored["run_id"]
        line = f"error: interrupted by SIGTERM as run {run_id} (no profiler) ended ok; 1 run of {experiment}"
        assert f"{line} stored" in said(r)
    else:
        assert [row["Phase"] for row in json.loads(r.stdout)][-1] == "step (sum)"
        assert "stopped after round 1: SIGTERM came as its last run ended" in said(r)


@pytest.mark.slow
def test_a_sigterm_as_the_workers_result_is_read_keeps_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal once the supervisor has ended (the worker's result being read, its folder removed) raised
    inside `run_isolated`: the run that had finished was lost, not stored."""
    read = worker.read_worker_result

    def late_read(*args, **kwargs):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGTERM)
        return read(*args, **kwargs)

    monkeypatch.setattr(worker, "read_worker_result", late_read)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["run", "char", "--device", "cpu", "--repeats", "2", "--steps", "1", "--warmup", "0", "--db", db]
    r = runner.invoke(app, args)
    assert r.exit_code == 143, r.output
    assert list(ResultsStore(db).runs()["status"]) == ["ok"]
    assert "run --repeats interrupted by SIGTERM between runs, after 1 of 2; the 1 run is stored" in said(r)


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    with signals.sigterm_raises():
        yield


def ok_run(run_id: str, config: RunConfig) -> RunResult:
    steps = [StepRecord(0, False, STEP)]
    return RunResult(run_id, config, "ok", device="cpu", device_name="cpu", steps=steps)


def as_it_ended(run_id: str, config: RunConfig) -> RunResult:
    """A run that ended ok as SIGTERM came."""
    os.kill(os.getpid(), signal.SIGTERM)
    return ok_run(run_id, config)


@contextlib.contextmanager
def kept_in_hand() -> Iterator[None]:
    """SIGTERM raising Terminated for the block; one that escapes it is the test's failure (the run it came
    with lost), not a KeyboardInterrupt that would stop the whole session."""
    try:
        with signals.sigterm_raises():
            yield
    except KeyboardInterrupt:
        pytest.fail("the signal was raised through the caller: the run that had ended was lost")


@pytest.mark.usefixtures("sigterm_raises")
def test_a_held_signal_is_passed_on_to_the_command_started_under_the_hold() -> None:
    """A loop holds signals from a run's start to its save: one that came before the worker started (its
    files being written) reaches the worker, which stops, instead of waiting for it to finish its run."""
    code = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\ntime.sleep(15)"
    with signals.deferred() as came:
        os.kill(os.getpid(), signal.SIGTERM)
        before = list(came)
        done = supervisor.run([sys.executable, "-c", code])
        after = list(came)
        came.clear()
    assert before == [signal.SIGTERM] and after == []  # taken over and passed on
    assert done.interrupted == signal.SIGTERM and done.returncode in (7, -signal.SIGTERM)


@pytest.mark.usefixtures("sigterm_raises")
def test_a_signal_handed_on_is_held_by_a_block_around_it_else_raised() -> None:
    with signals.deferred() as came:
        signals.hand_on(signal.SIGTERM)
        assert came == [signal.SIGTERM]
        came.clear()
    with pytest.raises(signals.Terminated):
        signals.hand_on(signal.SIGTERM)


RANKS = ["--device", "cpu", "--nproc", "2", "--steps", "2", "--warmup", "1", "--batch-size", "1",
         "--context-length", "32"]  # fmt: skip


def rank_results(config: RunConfig, run_id: str) -> dict[int, RunResult]:
    """What two ranks that finished their run leave: each its ok result, its steps carrying its rank."""
    ranks = {r: ok_run(run_id, config) for r in (0, 1)}
    for rank, result in ranks.items():
        result.tokens_per_s = 1000.0
        for step in result.steps:
            step.rank = rank
    return ranks


def ended_as(sig: int):  # type: ignore[no-untyped-def]
    """multirank.launch of ranks that all wrote an ok result as `sig` came (passed on to torchrun)."""
    from harness.execution.ranks import multirank

    def launch(config: RunConfig, run_id: str, wrap=None, on_steps=None) -> multirank.Launched:  # type: ignore[no-untyped-def]
        return multirank.Launched(rank_results(config, run_id), 1, "", sig)

    return launch


def test_a_run_across_ranks_finished_as_sigterm_came_is_kept_ok() -> None:
    """Every rank wrote its ok result as SIGTERM came: the run ended ok, with its steps and throughput."""
    from harness.execution.ranks import multirank

    config = RunConfig(model="char", device="cpu", nproc=2, warmup=0, steps=1)
    ranks = rank_results(config, "m-1")
    result = multirank.combine(config, "m-1", multirank.Launched(ranks, 1, "", signal.SIGTERM))
    assert (result.status, result.error) == ("ok", None)
    assert [s.rank for s in result.steps] == [0, 1]
    assert result.tokens_per_s == 2000.0  # summed over the ranks, as for any run that ended ok


def test_a_rank_that_did_not_finish_as_sigterm_came_leaves_the_run_interrupted() -> None:
    from harness.execution.ranks import multirank

    config = RunConfig(model="char", device="cpu", nproc=2, warmup=0, steps=1)
    ranks = rank_results(config, "m-1")
    ranks[1] = RunResult("m-1", config, "error", error="worker exit code 1", steps=[])
    result = multirank.combine(config, "m-1", multirank.Launched(ranks, 1, "", signal.SIGTERM))
    assert result.status == "interrupted"
    assert result.error == "interrupted by SIGTERM before every rank ended"
    assert signals.signal_in(result.error) == signal.SIGTERM
    assert len(result.steps) == 1  # rank 0's


def test_run_ranks_hands_on_a_signal_that_came_as_every_rank_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held by a block around it (a loop of runs, which stores the run and then stops), else raised."""
    from harness.execution.ranks import multirank

    monkeypatch.setattr(multirank, "launch", ended_as(signal.SIGTERM))
    config = RunConfig(model="char", device="cpu", nproc=2, warmup=0, steps=1)
    with kept_in_hand(), signals.deferred() as came:
        result = multirank.run_ranks(config, "m-1")
        assert came == [signal.SIGTERM]
        came.clear()
    assert result.status == "ok" and len(result.steps) == 2
    with signals.sigterm_raises(), pytest.raises(signals.Terminated):
        multirank.run_ranks(config, "m-2")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.usefixtures("sigint_raises")
def test_run_across_ranks_stores_a_run_every_rank_finished_as_a_signal_came(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    from harness.execution.ranks import multirank

    monkeypatch.setattr(multirank, "launch", ended_as(sig))
    db = f"sqlite:///{tmp_path}/r.sqlite"
    r = runner.invoke(app, ["run", "tiny", *RANKS, "--db", db])
    assert r.exit_code == signals.exit_code(sig), r.output
    store = ResultsStore(db)
    (run_id,) = store.runs()["run_id"]
    assert store.get(run_id).status == "ok"
    assert len(store.step_timings()) == 2 * len(STEP)  # a step of each rank, each phase
    name = signals.name(sig)
    assert f"error: run {run_id} interrupted by {name} as its ranks ended ok; stored as ok" in said(r)


def signal_once_ranks_wrote(monkeypatch: pytest.MonkeyPatch, sig: int) -> list[int]:
    """`sig` to this process (the harness) once every rank has written its result, while torchrun still
    runs (seen by the hung-rank watchdog, which the harness asks as it waits); the list it was sent in."""
    from harness.execution.ranks import multirank
    from harness.execution.ranks.distributed import rank_path

    ask, sent = multirank.Watchdog.__call__, []

    def watch(self: multirank.Watchdog) -> bool:
        if not sent and all(rank_path(self.result, r).exists() for r in self.ranks):
            sent.append(sig)
            os.kill(os.getpid(), sig)
        return ask(self)

    monkeypatch.setattr(multirank.Watchdog, "__call__", watch)
    return sent


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.usefixtures("sigint_raises")
def test_real_ranks_that_wrote_their_results_as_a_signal_came_are_stored_ok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    """The signal as torchrun's ranks have written their results and are exiting (torch's teardown): it is
    passed on to torchrun, which ends all the same; the run is stored ok with every step, then the command
    ends with the signal's code."""
    sent = signal_once_ranks_wrote(monkeypatch, sig)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    r = runner.invoke(app, ["run", "tiny", *RANKS, "--db", db])
    assert sent == [sig]
    assert r.exit_code == signals.exit_code(sig), r.output
    store = ResultsStore(db)
    (run_id,) = store.runs()["run_id"]
    assert store.get(run_id).status == "ok"
    steps = store.step_timings().groupby("rank")["step"].agg(set).to_dict()
    assert steps == {0: {0, 1, 2}, 1: {0, 1, 2}}  # warmup 0, measured 1 and 2
    name = signals.name(sig)
    assert f"error: run {run_id} interrupted by {name} as its ranks ended ok; stored as ok" in said(r)


def test_run_nsys_starts_no_capture_after_a_baseline_that_ended_as_sigterm_came(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from harness.execution import nsys
    from harness.profilers import nsys as nsys_profiler

    monkeypatch.setattr(nsys, "find_nsys", lambda path=None: SimpleNamespace(version="2024.4.1"))
    monkeypatch.setattr(nsys_profiler, "run_baseline", lambda config: (as_it_ended("b-1", config), None))
    monkeypatch.setattr(nsys_profiler, "launch", lambda *a, **k: pytest.fail("a capture after the signal"))
    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    options = nsys_profiler.NsysOptions(profile_dir=tmp_path)
    with kept_in_hand():
        out = nsys_profiler.profile_run(RunConfig(model="char", device="cpu"), options, store=store)
    assert out.error == "baseline run b-1 without nsys interrupted by SIGTERM as it ended ok; stored as ok"
    assert out.exit_status == 143
    assert list(store.runs()["status"]) == ["ok"]


def test_run_torch_keeps_a_run_that_ended_as_sigterm_came(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal raised inside `run_isolated` lost the run that had finished."""
    from harness.profilers import torch as torch_profiler

    def run(config: RunConfig, run_id: str, **kwargs) -> RunResult:  # type: ignore[no-untyped-def]
        return as_it_ended(run_id, config)

    monkeypatch.setattr(torch_profiler, "run_isolated", run)
    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    options = torch_profiler.TorchOptions(profile_dir=tmp_path / "traces")
    with kept_in_hand():
        out = torch_profiler.profile_run(RunConfig(model="char", device="cpu"), options, store=store)
    assert out.error == f"run {out.run_id} interrupted by SIGTERM as it ended ok; stored as ok"
    assert out.exit_status == 143
    assert list(store.runs()["status"]) == ["ok"]


def test_optimize_stores_a_timed_run_that_ended_as_sigterm_came_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.experiments import optimize

    made: list[str] = []

    def timed(config: RunConfig) -> RunResult:
        made.append(f"t-{len(made)}")
        return as_it_ended(made[-1], config)

    def capture(config: RunConfig):  # type: ignore[no-untyped-def]
        return ok_run(f"c-{len(made)}", config), {}, []  # no finding: the baseline timed alone

    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    config = RunConfig(model="char", device="cpu")
    with signals.sigterm_raises():
        done = optimize.optimize(config, store, capture=capture, timed=timed, repeats=3)
    assert done.interrupted == signal.SIGTERM and len(done.baseline_runs) == 1
    assert made == ["t-0"]  # no run after it
    assert sorted(store.runs()["run_id"]) == ["c-0", "t-0"]
