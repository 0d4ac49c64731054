"""`harness run --nsys` and `harness overhead` end to end with the real nsys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from procs import fixed_phase_times, logged_steps, marked, output, slow_to_finish, start, wait_until
from reading import flat
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore

pytestmark = [pytest.mark.slow, pytest.mark.nsys]
REPO = Path(__file__).resolve().parents[1]
PHASES = ("forward", "backward", "optimizer")
runner = CliRunner()


@pytest.mark.elsewhere
def test_run_nsys_table_output(in_tmp: Path) -> None:
    result = runner.invoke(app, ["run", "char", "--device", "cpu", "--nsys", "--steps", "2", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    for title in ("NVTX ranges (measured steps)", "NVTX vs in-process timers", "report:", "export:"):
        assert title in result.output
    # the health first, then the tables drawn from the capture; "CPU run" said of a run on the CPU
    said = "\n".join(line for line in result.output.splitlines() if not line.startswith("progress:"))
    assert said.startswith("note: health ok") or said.startswith("warning: health:")
    assert said.index("health") < said.index("NVTX ranges (measured steps)")
    assert "no CUDA kernels in the export (CPU run)" in result.output


def test_run_nsys_whose_capture_fails_is_stored_degraded(in_tmp: Path) -> None:
    """A real broken capture on a machine without a GPU: nsys told to trace the OS runtime only records no
    NVTX range of the steps the timers timed. The run says so first, is stored as degraded with why, exits
    1, and its findings are not ranked."""
    args = ["run", "char", "--device", "cpu", "--nsys", "--steps", "2", "--warmup", "1"]
    result = runner.invoke(app, [*args, "--nsys-arg=--trace=osrt"])
    assert result.exit_code == 1, result.output
    said = [line for line in result.output.splitlines() if not line.startswith("progress:")]
    assert (
        said[0].startswith("warning: run ")
        and " stored as degraded: its capture failed its health " in said[0]
    )
    assert "findings not ranked: the capture failed 1 health check (NVTX vs timers)" in result.output
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    profiled = next(r for r in listed if r["profiler"] == "nsys")
    assert profiled["status"] == "degraded"
    run = ResultsStore(readonly=True).get(profiled["run_id"])
    assert run.error == (
        "its capture failed its health checks: NVTX vs timers: 2 of 2 timed measured steps lack NVTX ranges: "
        "step 1 is the first, with no NVTX range; the export holds none"
    )


def test_overhead_prints_a_row_per_phase(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every phase of a run without nsys measures 1 ms, under nsys 1.25 ms: +25.0% with no spread, so one
    # verdict is right. The runs, nsys and the store are real.
    hook = fixed_phase_times(in_tmp / "inject", 1_000_000, 1_250_000)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([hook, os.environ.get("PYTHONPATH", "")]))
    args = ["overhead", "char", "--device", "cpu", "--repeats", "2", "--steps", "3", "--warmup", "1"]
    result = runner.invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["Phase"] for r in rows] == [*PHASES, "step (sum)"]
    for r, ms in zip(rows, (1, 1, 1, 3), strict=True):  # the step: its three phases
        assert (r["no nsys Avg (ns)"], r["nsys light Avg (ns)"]) == (ms * 1_000_000, ms * 1_250_000), r
        assert r["no nsys StdDev (ns)"] == r["nsys light StdDev (ns)"] == 0
        assert r["nsys light overhead (%)"] == pytest.approx(25.0)
        assert r["nsys light CI low (%)"] == pytest.approx(25.0) == r["nsys light CI high (%)"]
        assert r["nsys light verdict"] == "nsys light adds 25.0% (CI +25.0…+25.0%)"
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [r["profiler"] for r in listed] == ["none", "nsys", "none", "nsys"]  # alternated
    assert len({r["experiment"] for r in listed}) == 1
    # each profiled run is paired with the run without nsys made just before it
    assert [r["baseline_run_id"] for r in listed] == [None, listed[0]["run_id"], None, listed[2]["run_id"]]


@pytest.mark.elsewhere
def test_overhead_leaves_a_failed_round_out(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the 4th worker (round 2's run under nsys) dies at start-up; the rounds around it count. Workers are
    # counted by their command line: each also has a supervisor process, which is Python too.
    hook = in_tmp / "inject"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, pathlib\n"
        "argv = pathlib.Path('/proc/self/cmdline').read_bytes().split(b'\\0')\n"
        "if b'-m' in argv[1:3] and argv[argv.index(b'-m') + 1] == b'harness.execution.worker':\n"
        f"    counter = pathlib.Path({str(in_tmp / 'count')!r})\n"
        "    n = int(counter.read_text()) + 1 if counter.exists() else 1\n"
        "    counter.write_text(str(n))\n"
        "    if n == 4:\n        os._exit(3)\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    args = ["overhead", "char", "--device", "cpu", "--repeats", "2", "--steps", "2", "--warmup", "1"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    said = flat(result.output)
    assert "round 2 left out: nsys light run " in said and "worker exit code 3" in said
    assert "2 rounds × 2 steps = 4 steps each" in said
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [r["status"] for r in listed] == ["ok", "ok", "ok", "error", "ok", "ok"]  # all kept in the store


@pytest.mark.elsewhere
def test_overhead_ci_target_stops_at_max_time(in_tmp: Path) -> None:
    args = ["overhead", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--repeats", "1"]
    result = runner.invoke(app, [*args, "--ci-target", "0.001", "--max-time", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # two rounds at least (the interval needs run-to-run drift), then --max-time stops it short of ±0.001%
    said = flat(result.output)
    assert "stopped after 2 rounds" in said and "not yet under ±0.001%" in said
    assert "2 rounds × 2 steps = 4 steps each" in said
    assert "whole steps: " in said and "machine: load average" in said


def test_overhead_rejects_a_bad_ci_target(in_tmp: Path) -> None:
    result = runner.invoke(app, ["overhead", "char", "--device", "cpu", "--ci-target", "-1"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --ci-target must be a positive percentage, got -1"


def test_an_option_nsys_refuses_is_said_as_nsys_failing_not_the_program(in_tmp: Path) -> None:
    args = ["run", "char", "--device", "cpu", "--nsys", "--steps", "1", "--warmup", "0", "--no-nsys-baseline"]
    result = runner.invoke(app, [*args, "--nsys-arg=--no-such-option"])
    assert result.exit_code == 1
    assert (
        "error: nsys failed (exit code 1) before it recorded anything; no run under nsys stored"
        in result.output
    )
    assert "--no-such-option" in result.output  # nsys's own line says which
    assert "profiled program failed" not in result.output and "Traceback" not in result.output
    assert ResultsStore(readonly=True).count_runs() == 0


def test_overhead_of_an_option_nsys_refuses_stores_no_run_under_nsys(in_tmp: Path) -> None:
    """`overhead` with an option nsys refuses: one line naming nsys's refusal, as `run --nsys` says it, and
    only the run without nsys stored (an `error` run under nsys was stored, said as 'worker exit code 1'
    with nsys's lines joined by a literal \\n)."""
    args = ["overhead", "char", "--device", "cpu", "--repeats", "1", "--steps", "1", "--warmup", "0"]
    result = runner.invoke(app, [*args, "--mode", "forward", "--nsys-arg=--no-such-option"])
    assert result.exit_code == 1, result.output
    said = [line for line in result.output.splitlines() if not line.startswith("progress:")]
    assert said == [
        "error: nsys light: nsys failed (exit code 1) before it recorded anything; no run under nsys stored: "
        "unrecognised option '--no-such-option'"
    ]
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [(r["profiler"], r["status"]) for r in listed] == [("none", "ok")]


def test_failing_program_keeps_files_and_says_so(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker (the Python process under nsys) dies at start-up with exit code 3
    hook = in_tmp / "inject"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\n"
        "argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "if b'-m' in argv[1:3] and argv[argv.index(b'-m') + 1] == b'harness.execution.worker':\n"
        "    sys.stderr.write('boom: injected failure\\n')\n"
        "    sys.stderr.flush()\n"
        "    os._exit(3)\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), str(REPO)]))
    args = ["run", "char", "--device", "cpu", "--nsys", "--steps", "1", "--warmup", "0", "--no-nsys-baseline"]
    result = runner.invoke(app, args)
    assert result.exit_code == 3  # the profiled program's exit code
    assert "profiled program failed (exit code 3)" in result.output
    assert "boom: injected failure" in result.output
    assert "files kept:" in result.output
    assert list((in_tmp / "nsys_profiles").glob("*.nsys-rep"))  # partial report kept
    assert "Traceback" not in result.output


def test_measured_capture_leaves_warmup_out(in_tmp: Path) -> None:
    from analysis.tables.nvtx import nvtx_ranges
    from analysis.trace.opening import open_trace

    args = ["run", "char", "--device", "cpu", "--nsys", "--nsys-capture", "measured", "--no-nsys-baseline"]
    result = runner.invoke(app, [*args, "--steps", "3", "--warmup", "2", "--format", "json"])
    tables = json.loads(result.stdout)
    # three steps of a few-ms optimizer: on a loaded machine one NVTX call held up under nsys moves the
    # agreement past its 10% (the run then ends degraded, exit 1); the agreement tests judge that verdict
    failed = {c["Check"] for c in tables["health"] if c["Status"] == "fail"}
    assert failed <= {"NVTX vs timers"} and result.exit_code == (1 if failed else 0), result.output
    (sqlite,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    ranges = nvtx_ranges(open_trace(sqlite), names=["forward"])
    assert sorted(ranges["payload"].astype(int)) == [2, 3, 4]  # steps 0 and 1 were warmup
    assert {r["Phase"]: r["Steps"] for r in tables["NVTX vs in-process timers"]} == dict.fromkeys(PHASES, 3)
    assert "nsys overhead (one run each; `harness overhead` alternates repeats)" not in tables


@pytest.mark.parametrize("under", [("profiles",), ()])
def test_unwritable_profile_dir_is_one_line_naming_the_file_in_the_way(
    in_tmp: Path, under: tuple[str, ...]
) -> None:
    (in_tmp / "file").write_text("x")
    folder = in_tmp.joinpath("file", *under)  # a file where the folder, or one above it, must be
    result = runner.invoke(app, ["run", "char", "--device", "cpu", "--nsys", "--profile-dir", str(folder)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: cannot create profile folder {folder}: {in_tmp / 'file'} is a file, not a folder; pass "
        "--profile-dir"
    ]  # mkdir's own words were "Not a directory" or "File exists"


def test_report_name_given_with_nsys_arg_is_followed(in_tmp: Path) -> None:
    args = ["run", "char", "--device", "cpu", "--nsys", "--steps", "1", "--warmup", "0", "--no-nsys-baseline"]
    result = runner.invoke(app, [*args, "--nsys-arg=--output=out/custom", "--format", "json"])
    assert result.exit_code == 0, result.output
    rep, sqlite = in_tmp / "out" / "custom.nsys-rep", in_tmp / "out" / "custom.sqlite"
    assert rep.is_file() and sqlite.is_file()
    assert not (in_tmp / "nsys_profiles").exists() or not list((in_tmp / "nsys_profiles").iterdir())
    (stored,) = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert (stored["nsys_rep"], stored["nsys_sqlite"]) == (str(rep), str(sqlite))
    assert "NVTX vs in-process timers" in json.loads(result.stdout)


# --- interruptions, with real processes -----------------------------------------------------------------

LONG_RUN = ["run", "char", "--device", "cpu", "--nsys", "--steps", "100000", "--warmup", "1", "-b", "1"]


def _start_long_run(
    tmp_path: Path, nsys_bin: str, **env: str
) -> tuple[subprocess.Popen[bytes], Path, Path, str]:
    """`harness run --nsys` as a real process, returned once its worker has measured two steps."""
    tmp, db, mark = tmp_path / "tmp", tmp_path / "r.sqlite", uuid.uuid4().hex
    tmp.mkdir()
    args = [*LONG_RUN, "-t", "32", "--no-nsys-baseline", "--db", str(db), "--format", "json"]
    proc = start(args, tmp_path, mark, TMPDIR=str(tmp), HARNESS_NSYS=nsys_bin, **env)
    try:
        wait_until(lambda: logged_steps(tmp) >= 3, 300, "the worker under nsys to measure two steps")
    except AssertionError:
        proc.kill()
        raise AssertionError(output(tmp_path)) from None
    return proc, tmp, db, mark


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_interrupted_run_is_stored_with_its_steps_and_profile(
    tmp_path: Path, nsys_bin: str, sig: int, code: int
) -> None:
    proc, tmp, db, mark = _start_long_run(tmp_path, nsys_bin)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: the foreground process group
    else:
        proc.send_signal(sig)
    assert proc.wait(300) == code, output(tmp_path)
    text = output(tmp_path)
    assert "Traceback" not in text and "profiled program failed" not in text
    (run,) = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    steps = ResultsStore(str(db), readonly=True).step_timings([run["run_id"]])
    measured = int((~steps["warmup"]).sum() / 3)
    assert measured >= 2 and run["status"] == "interrupted" and run["profiler"] == "nsys"
    name = signal.Signals(sig).name
    line = f"run {run['run_id']} interrupted by {name} after {measured} of 100000 measured steps"
    assert f"error: {line}; stored as interrupted; files kept: {run['nsys_rep']}" in flat(text)
    assert Path(run["nsys_rep"]).is_file() and Path(run["nsys_sqlite"]).is_file()
    # as it ended: the health `harness health RUN` says (never sound: the capture is partial), and its table
    # with the steps it finished, as `harness runs` shows them
    shown = json.loads((tmp_path / "stdout.txt").read_text())
    health = runner.invoke(app, ["health", run["run_id"], "--db", str(db), "--format", "json"])
    judged = json.loads(health.stdout)["health"]
    assert shown["health"] == judged and {r["Status"] for r in judged} != {"ok"}
    titled = f"run {run['run_id']} under nsys"
    (row,) = next(rows for title, rows in shown.items() if title.startswith(titled))
    assert row["status"] == "interrupted"
    assert row["forward mean (ns)"] == pytest.approx(run["forward_mean_ns"])
    assert marked(mark) == []
    assert list(tmp.glob("harness-*")) == []


def test_a_worker_finishing_after_nsys_exited_keeps_its_steps(tmp_path: Path, nsys_bin: str) -> None:
    """SIGTERM: nsys stops recording, passes the signal to the worker and exits without waiting for it. On
    a loaded machine the worker was still finishing then, and the supervisor, ending what nsys left, sent
    it SIGTERM again 3 s later (raised, it threw the steps away: "interrupted by SIGTERM before the first
    step") and SIGKILL 3 s after that (its result never written). The worker here finishes after both
    would have come: its run is stored as any run stopped by SIGTERM is."""
    said = tmp_path / "finished"
    proc, tmp, db, mark = _start_long_run(tmp_path, nsys_bin, **slow_to_finish(tmp_path / "hook", said))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(300) == 143, output(tmp_path)
    assert said.read_text() == "after nsys exited"  # the worker was still finishing when nsys had gone
    text = output(tmp_path)
    assert "Traceback" not in text
    (run,) = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    steps = ResultsStore(str(db), readonly=True).step_timings([run["run_id"]])
    measured = int((~steps["warmup"]).sum() / 3)
    assert measured >= 2 and run["status"] == "interrupted"
    line = f"run {run['run_id']} interrupted by SIGTERM after {measured} of 100000 measured steps"
    assert f"error: {line}; stored as interrupted; files kept: {run['nsys_rep']}" in flat(text)
    assert marked(mark) == []
    assert list(tmp.glob("harness-*")) == []


def test_killed_harness_leaves_no_process_and_no_temporary_folder(tmp_path: Path, nsys_bin: str) -> None:
    proc, tmp, _, mark = _start_long_run(tmp_path, nsys_bin)
    # harness, supervisor, nsys, its launcher, agent and tee, the worker (one may be in exec, unreadable)
    wait_until(lambda: len(marked(mark)) >= 6, 10, "the harness and the processes it started to be seen")
    proc.kill()
    proc.wait()
    wait_until(lambda: not marked(mark), 120, "every process the harness started to end")
    wait_until(lambda: not list(tmp.glob("harness-*")), 10, "the temporary folder to be removed")


def _importing(mark: str) -> bool:
    return any("QdstrmImporter" in p for p in marked(mark))


@pytest.mark.parametrize(
    ("sig", "code", "group"),
    [(signal.SIGINT, 130, True), (signal.SIGTERM, 143, False), (signal.SIGTERM, 143, True)],
    ids=["ctrl-c-to-the-group", "sigterm-to-the-process", "sigterm-to-the-group"],
)
def test_a_signal_while_nsys_imports_keeps_the_report(
    tmp_path: Path, nsys_bin: str, sig: int, code: int, group: bool
) -> None:
    """The run ended, nsys's importer (QdstrmImporter) runs: told to stop there, nsys deleted the .qdstrm and
    the report, and the run was stored `ok` with no files, exit 1. Now the signal is held, the report and
    export finished, the run stored `interrupted` with them."""
    tmp, db, mark = tmp_path / "tmp", tmp_path / "r.sqlite", uuid.uuid4().hex
    tmp.mkdir()
    args = ["run", "tiny", "--nsys", "--device", "cpu", "--steps", "2", "--warmup", "1", "--no-nsys-baseline"]
    proc = start([*args, "--db", str(db)], tmp_path, mark, TMPDIR=str(tmp), HARNESS_NSYS=nsys_bin)
    try:
        wait_until(lambda: _importing(mark) or proc.poll() is not None, 600, "nsys's importer to start")
    except AssertionError:
        proc.kill()
        raise AssertionError(output(tmp_path)) from None
    assert proc.poll() is None, output(tmp_path)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    assert proc.wait(300) == code, output(tmp_path)
    text = flat(output(tmp_path))
    (run,) = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    assert run["status"] == "interrupted"
    rep, sqlite = Path(run["nsys_rep"]), Path(run["nsys_sqlite"])
    assert rep.stat().st_size > 0 and sqlite.stat().st_size > 0
    name = signal.Signals(sig).name
    said = (
        f"error: run {run['run_id']} interrupted by {name} while nsys wrote its report, after all 2 measured "
        f"steps; stored as interrupted; files kept: {rep}, {sqlite}"
    )
    assert said in text and "Traceback" not in text
    steps = ResultsStore(str(db), readonly=True).step_timings([run["run_id"]])
    assert int((~steps["warmup"]).sum()) == 2 * len(PHASES)
    wait_until(lambda: not marked(mark), 60, "every process the harness started to end")


def test_overhead_stopped_by_ctrl_c_keeps_the_rounds_done_and_runs_no_more(
    tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run's process ends on Ctrl-C as the harness passes it on: an interrupted run stops the whole
    measurement (it went on with the next round, so Ctrl-C stopped one run only)."""
    import signal

    from harness.core.records import RunConfig, RunResult, StepRecord
    from harness.experiments import overhead

    made: list[str] = []

    def result(run_id: str, config: RunConfig, status: str = "ok") -> RunResult:
        steps = [
            StepRecord(i, False, {"forward": 10 + len(made), "backward": 20, "optimizer": 5})
            for i in range(2)
        ]
        error = "interrupted by SIGINT after 1 of 2 measured steps" if status == "interrupted" else None
        return RunResult(run_id, config, status, device="cpu", device_name="cpu", steps=steps, error=error)

    def baseline(config: RunConfig) -> tuple[RunResult, None]:
        made.append(f"base-{len(made)}")
        return result(made[-1], config), None

    class Profiled:  # a profiler whose second run is stopped by Ctrl-C
        name = "nsys"

        def overhead_runs(self, config, options, modes):  # type: ignore[no-untyped-def]
            def run():  # type: ignore[no-untyped-def]
                made.append(f"prof-{len(made)}")
                status = "interrupted" if len(made) == 4 else "ok"
                return result(made[-1], config, status), {"profiler": "nsys"}, []

            return [("nsys light", run)]

    monkeypatch.setattr(overhead, "run_baseline", baseline)
    config = RunConfig(model="char", device="cpu", warmup=0, steps=2)
    done = overhead.measure_overhead(
        config, Profiled(), None, repeats=3, modes=["light"], store=ResultsStore(tmp_db)
    )  # type: ignore[arg-type]
    assert made == ["base-0", "prof-1", "base-2", "prof-3"]  # no third round
    assert done.interrupted == signal.SIGINT and done.repeats == 1
    assert done.notes[0] == (
        "stopped in round 2: nsys light run prof-3 interrupted by SIGINT after 1 of 2 measured steps; "
        "stored as interrupted"
    )
    assert len(ResultsStore(tmp_db, readonly=True).runs()) == 4  # every run kept, the stopped one too


def test_overhead_of_one_round_says_one_round(in_tmp: Path) -> None:
    args = ["overhead", "char", "--device", "cpu", "--repeats", "1", "--steps", "2", "--warmup", "1"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "(1 round × 2 steps = 2 steps each; " in flat(result.output)
