"""A run's own health (profiler overhead, NVTX vs timers, missing ranks, a busy machine), the capture check,
and the advice stored with a run (`show` repeats it; `advise RUN`, `health RUN`)."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3

import pandas as pd
import pytest
from conftest import NsysRun
from reading import flat
from test_agreement import PHASES, timers_frame
from test_store import make_result
from typer.testing import CliRunner

from analysis.advice.findings import Finding, advice, as_record
from analysis.advice.health import (
    CUDA_RANGE_FIX,
    FAIL,
    NO_RANGE_FIX,
    NOT_KNOWN,
    NVTX_RANGE_FIX,
    OK,
    WARN,
    Health,
    capture_health,
    overhead_in_phases,
)
from analysis.advice.record import advice_record, finding_lines, health_line, summary_lines, untrusted_line
from analysis.advice.run_checks import Overhead, RunFacts, run_checks
from analysis.compare.agreement import agreement_table, pair_ranges
from analysis.tables.nvtx import nvtx_ranges
from analysis.trace.opening import open_trace
from harness.cli import app
from harness.core.machine import MachineLoad
from harness.experiments.advice import run_advice, stored_facts
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()


def checks(facts: RunFacts) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.evidence) for c in run_checks(facts)}


def _pair(store: ResultsStore, fwd_profiled: int) -> None:
    base = make_result("tiny-base")
    save_run(store, base, experiment="overhead-x")
    save_run(
        store,
        make_result("tiny-prof", fwd=fwd_profiled),
        profiler="nsys",
        nsys_mode="light",
        experiment="overhead-x",
        baseline_run_id="tiny-base",
    )


def test_profiler_overhead_fails_from_20_percent(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    _pair(store, 1_300_000)  # every phase 30% longer: steps 4,550,004..08 against 3,500,004..08
    o = stored_facts(store, store.get("tiny-prof")).overhead
    assert o is not None and o.runs == 1 and o.baseline == "baseline run tiny-base"
    assert o.effect_pct == pytest.approx((4_550_006 - 3_500_006) / 3_500_006 * 100)
    assert o.ci_low_pct < o.effect_pct < o.ci_high_pct
    status, evidence = checks(RunFacts(overhead=o))["profiler overhead"]
    assert status == FAIL
    assert evidence.startswith("nsys light adds +30.0% to the step (95% CI ") and "20% or more" in evidence


def test_profiler_overhead_below_5_percent_is_ok(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    _pair(store, 1_010_000)  # 1% longer
    o = stored_facts(store, store.get("tiny-prof")).overhead
    assert o is not None and o.effect_pct == pytest.approx((3_535_006 - 3_500_006) / 3_500_006 * 100)
    assert checks(RunFacts(overhead=o))["profiler overhead"][0] == OK
    assert stored_facts(store, store.get("tiny-base")).overhead is None  # a run without a profiler


def _cpu_train_agreement(cpu_export, scale_backward: float) -> pd.DataFrame:
    records = json.loads((cpu_export.parent / "timers.json").read_text())
    records = [{**r, "backward_ns": int(r["backward_ns"] * scale_backward)} for r in records]
    ranges = nvtx_ranges(open_trace(cpu_export), names=["step", *PHASES])
    return agreement_table(pair_ranges(timers_frame(records), ranges, PHASES), PHASES)


def test_nvtx_and_timers_agree_on_cpu_train(cpu_export) -> None:
    table = _cpu_train_agreement(cpu_export, 1.0)
    worst = table.loc[table["rel_diff"].abs().idxmax()]
    status, evidence = checks(RunFacts(agreement=table))["NVTX vs timers"]
    assert status == OK
    assert evidence.startswith(
        f"largest difference {worst['rel_diff'] * 100:+.2f}% ({worst['phase']}, 5 steps)"
    )


def test_nvtx_and_timers_disagreeing_warns(cpu_export) -> None:
    # the same export with every backward timer 5% longer than it was: NVTX now reads about 5% shorter
    table = _cpu_train_agreement(cpu_export, 1.05).set_index("phase")
    nvtx, timer = table.loc["backward", "nvtx_mean_ns"], table.loc["backward", "timer_mean_ns"]
    pct = table.loc["backward", "rel_diff"] * 100
    assert pct == pytest.approx((nvtx - timer) / timer * 100) and -6 < pct < -4
    status, evidence = checks(RunFacts(agreement=table.reset_index()))["NVTX vs timers"]
    assert status == WARN and evidence == f"largest difference {pct:+.2f}% (backward, 5 steps): 2% or more"


def _with_phase(table: pd.DataFrame, phase: str, nvtx_ns: float, timer_ns: float) -> pd.DataFrame:
    nvtx = {"nvtx_mean_ns": nvtx_ns, "nvtx_median_ns": nvtx_ns}
    means = {**nvtx, "timer_mean_ns": timer_ns, "timer_median_ns": timer_ns}
    row = {"phase": phase, "steps": 3, **means, "rel_diff": (nvtx_ns - timer_ns) / timer_ns}
    return pd.concat([table, pd.DataFrame([row])], ignore_index=True)


def test_a_phase_of_a_few_microseconds_is_not_judged_by_its_percentage(cpu_export) -> None:
    """One token's decode under nsys on a CPU: 26 µs by the timers, 30 µs by its ranges (+13%, the
    ranges' own cost); the same +13% on a 2 ms phase fails."""
    table = _cpu_train_agreement(cpu_export, 1.0)
    status, evidence = checks(RunFacts(agreement=_with_phase(table, "decode", 30_000, 26_500)))[
        "NVTX vs timers"
    ]
    assert status == OK
    assert evidence == (
        "largest difference +13.21% (decode, 3 steps), 4 µs a step; every phase within 2% or 50 µs a step "
        "(what the ranges and the timers themselves cost)"
    )
    status, evidence = checks(RunFacts(agreement=_with_phase(table, "decode", 2_264_000, 2_000_000)))[
        "NVTX vs timers"
    ]
    assert status == FAIL and evidence == "largest difference +13.20% (decode, 3 steps): 10% or more"


def test_a_busy_machine_makes_a_disagreement_a_warning_not_a_failure(cpu_export) -> None:
    """On a busy machine the load holds up a range's push or pop, which NVTX times and the timers do not:
    the same +13% on a 2 ms phase warns there, naming the load. Steps without their ranges still fail."""
    busy = MachineLoad(
        cpus=2, seconds=4.0, load_before=3.1, load_after=3.4, others_share=0.45, own_share=0.5
    ).busy_reasons()
    assert busy == ["load average 3.10 before on 2 CPUs", "other processes took 45% of the CPU time"]
    table = _with_phase(_cpu_train_agreement(cpu_export, 1.0), "decode", 2_264_000, 2_000_000)
    status, evidence = checks(RunFacts(agreement=table, busy=busy))["NVTX vs timers"]
    assert status == WARN and evidence == (
        "largest difference +13.20% (decode, 3 steps): 10% or more, on a busy machine (load average 3.10 "
        "before on 2 CPUs; other processes took 45% of the CPU time)"
    )
    assert checks(RunFacts(agreement=table, busy=[]))["NVTX vs timers"][0] == FAIL  # a quiet machine
    timed = {step: list(PHASES) for step in range(3, 9)}  # 6 timed steps; the ranges pair 5 (3 for decode)
    status, evidence = checks(RunFacts(agreement=table, busy=busy, timed=timed))["NVTX vs timers"]
    assert status == FAIL and evidence.startswith("NVTX ranges paired with fewer steps than the timers timed")


def test_one_paired_step_is_said_as_one() -> None:
    """A phase the ranges and timers pair in one step only (a run of `--steps 1`): `1 step`, not `1 steps`."""
    row = {"phase": "forward", "steps": 1, "nvtx_mean_ns": 20_100_000.0, "timer_mean_ns": 20_000_000.0}
    table = pd.DataFrame([{**row, "nvtx_median_ns": 20_100_000.0, "timer_median_ns": 20_000_000.0,
                           "rel_diff": 0.005}])  # fmt: skip
    status, evidence = checks(RunFacts(agreement=table))["NVTX vs timers"]
    assert status == OK and evidence == "largest difference +0.50% (forward, 1 step); every phase within 2%"


def test_a_stored_run_is_judged_by_its_phases_means_too(tmp_db: str, cpu_export) -> None:
    store = ResultsStore(tmp_db)
    agreement = _with_phase(_cpu_train_agreement(cpu_export, 1.0), "decode", 30_000, 26_500)
    save_run(store, make_result("tiny-short"), profiler="nsys", nsys_mode="light", agreement=agreement)
    status, evidence = checks(stored_facts(store, store.get("tiny-short")))["NVTX vs timers"]
    assert status == OK and evidence.startswith("largest difference +13.21% (decode, 3 steps), 4 µs a step")


def test_a_program_ended_by_a_signal_is_said_and_only_then() -> None:
    assert "program end" not in checks(RunFacts())
    status, evidence = checks(RunFacts(signal=9))["program end"]
    assert status == WARN and evidence.startswith("the program was ended by signal 9: what nsys had not yet")


def test_missing_ranks_fail_and_all_ranks_pass() -> None:
    status, evidence = checks(RunFacts(world_size=4, ranks_seen=[0, 2]))["ranks"]
    assert status == FAIL and evidence == "2 of 4 ranks reported no step (rank 1, 3)"
    assert checks(RunFacts(world_size=2, ranks_seen=[0, 1]))["ranks"] == (OK, "all 2 ranks reported steps")


def test_busy_machine_warns_and_quiet_passes(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    busy, quiet = make_result("tiny-busy"), make_result("tiny-quiet")
    busy.extra["machine"] = MachineLoad(2, 10.0, 1.6, 1.8, 0.25, 0.5).to_dict()
    quiet.extra["machine"] = MachineLoad(2, 10.0, 0.2, 0.3, 0.02, 0.5).to_dict()
    save_run(store, busy)
    save_run(store, quiet)
    status, evidence = checks(stored_facts(store, store.get("tiny-busy")))["machine load"]
    assert status == WARN
    assert evidence == (
        "busy while the run ran: load average 1.60 before on 2 CPUs; other processes took 25% of the CPU time"
    )
    assert checks(stored_facts(store, store.get("tiny-quiet")))["machine load"] == (
        OK,
        "quiet while the run ran",
    )


def test_capture_check_on_a_real_export_and_on_one_emptied(cpu_export, tmp_path) -> None:
    with open_trace(cpu_export) as trace:
        nvtx, osrt = trace.count("nvtx"), trace.count("osrt")
        first = capture_health(trace).checks[0]
    assert (first.name, first.status) == ("capture", OK)
    assert first.evidence == f"{nvtx + osrt:,} events recorded ({osrt:,} osrt, {nvtx:,} nvtx)"
    # the same export with its events deleted: what a capture range that never started leaves
    with open_trace(_emptied(cpu_export, tmp_path)) as trace:
        first = capture_health(trace).checks[0]
    assert (first.name, first.status) == ("capture", FAIL)
    assert first.evidence.startswith("no event recorded after the capture started")


def _emptied(export, folder):
    """A copy of `export` with its events deleted: its `capture` check fails."""
    empty = folder / "empty.sqlite"
    shutil.copy(export, empty)
    with sqlite3.connect(empty) as db:
        db.execute("DELETE FROM NVTX_EVENTS")
        db.execute("DELETE FROM OSRT_API")
    return empty


def test_a_capture_that_recorded_nothing_is_advised_for_how_it_was_captured(
    cpu_export, tmp_path, monkeypatch
) -> None:
    """The advice spoke of --capture-range to a run captured without one: a capture range is advised only
    where nsys was given one, and `harness profile -- true` (none) is told what applies to it."""
    from harness.execution.nsys import NsysInfo, ProfileResult
    from harness.experiments import program

    empty = _emptied(cpu_export, tmp_path)
    fixes = {}
    for given in (None, "--capture-range=nvtx", "-c cudaProfilerApi", NOT_KNOWN):
        with open_trace(empty) as trace:
            first = capture_health(trace, capture_range=given).checks[0]
        assert (first.name, first.status) == ("capture", FAIL)
        fixes[given] = first.fix
    assert fixes[None] == NO_RANGE_FIX and "capture-range" not in NO_RANGE_FIX.replace("no capture range", "")
    assert fixes["--capture-range=nvtx"] == f"with --capture-range=nvtx {NVTX_RANGE_FIX}"
    assert fixes["-c cudaProfilerApi"] == f"with -c cudaProfilerApi {CUDA_RANGE_FIX}"
    assert NVTX_RANGE_FIX in fixes[NOT_KNOWN] and CUDA_RANGE_FIX in fixes[NOT_KNOWN]  # an export alone
    info = NsysInfo(path=tmp_path / "nsys", version="2023.4.4.54", flags=frozenset(), source="t")
    monkeypatch.setattr(program.nsys, "find_nsys", lambda path: info)
    monkeypatch.setattr(program.nsys, "profile", lambda *a, **k: ProfileResult(0, empty, empty, None, ""))
    store = ResultsStore(str(tmp_path / "r.sqlite"))
    for args, fix in (((), fixes[None]), (("--capture-range=nvtx",), fixes["--capture-range=nvtx"])):
        out = program.profile_program(["true"], store=store, nsys_args=args, profile_dir=tmp_path / "p")
        assert out.advice is not None
        assert out.advice["health"]["checks"][0]["fix"] == fix
        # `health RUN` and `advise RUN` read the capture again, as it was made
        assert run_advice(store, out.run_id).health.checks[0].fix == fix


def test_a_failed_capture_check_is_said_as_a_health_check_it_failed(cpu_export, tmp_path) -> None:
    """The check named `capture` read `the capture failed capture` wherever the failed checks were named."""
    empty = _emptied(cpu_export, tmp_path)
    with open_trace(empty) as trace:
        record = advice_record(capture_health(trace), [])
    assert untrusted_line(record, "r1") == (
        "findings not ranked: the capture failed 1 health check (capture), so their time at stake would come "
        "from what is left of it (0 fired; `harness advise r1 --ignore-health` lists them, untrusted)"
    )
    refused = runner.invoke(app, ["advise", str(empty)], env={"COLUMNS": "200"})
    assert refused.exit_code == 1
    assert "its capture failed 1 health check (capture), so" in refused.stderr.replace("\n", " ")
    anyway = runner.invoke(app, ["advise", str(empty), "--ignore-health"], env={"COLUMNS": "200"})
    assert anyway.exit_code == 0, anyway.output
    assert (
        "warning: untrusted: the capture of empty.sqlite failed 1 health check (capture)\n" in anyway.stderr
    )
    assert "failed capture" not in refused.stderr + anyway.stderr


def test_health_line_names_the_worst_and_findings_one_line_each() -> None:
    health = Health("x.sqlite")
    health.checks = run_checks(
        RunFacts(world_size=2, ranks_seen=[0], busy=["load average 3.00 before on 2 CPUs"])
    )
    found = [
        Finding("host-sync", 79_000, "forward 100%", "24 calls", "drop .item()"),
        Finding("gpu-host-wait", 540_091_000, "forward 47%", "idle", "overlap"),
    ]
    record = advice_record(health, sorted(found, key=lambda f: -f.at_stake_ns))
    assert health_line(record) == (
        "health: 1 failure, 1 warning of 5 checks; worst: ranks (fail): "
        "1 of 2 ranks reported no step (rank 1)"
    )
    assert summary_lines(record)[1:] == [
        "finding 1: gpu-host-wait: 540.091 ms at stake (forward 47%); fix: overlap",
        "finding 2: host-sync: 0.079 ms at stake (forward 100%); fix: drop .item()",
    ]
    # seconds at stake (recompile on a CPU under nsys) read with thousands separated, as every table's ms
    long = advice_record(health, [Finding("recompile", 44_147_493_000, "forward 100%", "4 frames", "stop")])
    assert finding_lines(long) == ["finding 1: recompile: 44,147.493 ms at stake (forward 100%); fix: stop"]
    health.checks = run_checks(RunFacts())
    assert summary_lines(advice_record(health, [])) == ["health ok (5 checks)", "findings: none fired"]


def test_show_repeats_stored_advice_and_csv_json_carry_it(tmp_db: str, cpu_export) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-prof"), profiler="nsys", nsys_mode="light", nsys_sqlite=str(cpu_export))
    with open_trace(cpu_export) as trace:
        health = capture_health(trace)
    health.checks += run_checks(RunFacts())
    record = advice_record(
        health, [Finding("host-sync", 2_500_000, "forward 100%", "8 calls", "drop .item()")]
    )
    store.save_advice("tiny-prof", record)
    shown = runner.invoke(app, ["show", "latest"], catch_exceptions=False)
    assert shown.exit_code == 0
    assert health_line(record) in shown.stderr
    assert "finding 1: host-sync: 2.500 ms at stake (forward 100%); fix: drop .item()" in shown.stderr
    doc = json.loads(runner.invoke(app, ["show", "-1", "--format", "json"]).stdout)
    assert doc["findings"] == [
        {"Rule": "host-sync", "Time at stake (ns)": 2_500_000, "Where": "forward 100%",
         "Evidence": "8 calls", "Fix": "drop .item()", "Data": {}}
    ]  # fmt: skip
    assert [c["Check"] for c in doc["health"]][-5:] == [
        "profiler overhead",
        "NVTX vs timers",
        "ranks",
        "machine load",
        "device",
    ]
    csv = runner.invoke(app, ["show", "-1", "--format", "csv"]).stdout
    assert "# findings\nRule,Time at stake (ns),Where,Evidence,Fix,Data\nhost-sync,2500000," in csv


def test_health_and_advise_take_a_run(tmp_db: str, cpu_export) -> None:
    store = ResultsStore(tmp_db)
    _pair(store, 1_300_000)
    save_run(store, make_result("tiny-prof", fwd=1_300_000), profiler="nsys", nsys_mode="light",
               experiment="overhead-x", baseline_run_id="tiny-base", nsys_sqlite=str(cpu_export))  # fmt: skip
    advice = run_advice(store, "latest")
    by_name = {c.name: c.status for c in advice.health.checks}
    assert by_name["capture"] == OK and by_name["profiler overhead"] == FAIL  # the export's and the run's
    result = runner.invoke(app, ["health", "-1", "--strict", "--format", "csv"])
    assert result.exit_code == 1  # a failed check under --strict
    table = pd.read_csv(io.StringIO(result.stdout)).set_index("Check")
    assert table.loc["profiler overhead", "Status"] == "fail"
    assert table.loc["profiler overhead", "Evidence"].startswith("nsys light adds +30.0% to the step")
    advise = runner.invoke(app, ["advise", "tiny-prof", "-t", "overhead_share=0.01", "--format", "json"])
    assert advise.exit_code == 0, advise.output
    rows = json.loads(advise.stdout)["findings"]
    assert [r["Rule"] for r in rows] == [
        "nsys-overhead-in-phase"
    ]  # fires from 1%: cpu-train's forward holds 1.7%
    with open_trace(cpu_export) as trace:
        inside = overhead_in_phases(trace).set_index("Phase")
    assert rows[0]["Time at stake (ns)"] == inside.loc["forward", "Overhead (ns)"] == 2_685_231


RUN = ["--device", "cpu", "--steps", "2", "--warmup", "1", "--no-nsys-baseline"]


@pytest.mark.slow
@pytest.mark.elsewhere
@pytest.mark.xdist_group("nsys-tiny")
def test_run_nsys_prints_its_health_and_findings_and_show_repeats_them(nsys_tiny: NsysRun) -> None:
    run = ResultsStore(nsys_tiny.db, readonly=True).get("latest")
    assert run.advice is not None
    line = health_line(run.advice)
    checks = {c["name"]: c["status"] for c in run.advice["health"]["checks"]}
    assert checks["capture"] == OK and checks["NVTX ranges"] == OK and checks["ranks"] == OK
    assert checks["profiler overhead"] == OK  # no baseline run: no figure, said so
    said = flat(nsys_tiny.stderr)
    # a CPU run launches no kernel: said, not left to read as a clean GPU
    none = "findings: none fired (the capture has no CUDA: the rules that read CUDA had nothing to judge)"
    assert flat(line) in said and none in said
    shown = runner.invoke(app, ["show", "-1", "--db", nsys_tiny.db], catch_exceptions=False)
    assert flat(line) in flat(shown.stderr) and none in flat(shown.stderr)


@pytest.mark.slow
def test_a_capture_range_that_never_started_is_named(tmp_db: str, nsys_bin, tmp_path) -> None:
    never = ["--nsys-arg=--capture-range=nvtx", "--nsys-arg=--nvtx-capture=never-pushed"]
    prof = tmp_path / "prof"
    result = runner.invoke(
        app, ["run", "tiny", "--nsys", *RUN, *never, "--profile-dir", str(prof)], catch_exceptions=False
    )
    assert result.exit_code != 0
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(
        "error: the capture range never started (--capture-range=nvtx): nsys recorded nothing"
    )
    assert not prof.exists() or list(prof.iterdir()) == []  # nsys 2022.4 writes no report at all


def test_run_nsys_json_and_csv_carry_health_and_findings(capsys) -> None:
    from harness.cli.render import render_profiled
    from harness.profilers.nsys import ProfiledRun

    health = Health("r.sqlite")
    health.checks = run_checks(RunFacts(world_size=2, ranks_seen=[0]))
    record = advice_record(health, [Finding("host-sync", 79_000, "forward 100%", "24 calls", "drop .item()")])
    render_profiled(ProfiledRun(run_id="r", result=None, profile=None, advice=record), "json")
    doc = json.loads(capsys.readouterr().out)
    assert [c["Status"] for c in doc["health"]] == ["ok", "ok", "fail", "ok", "ok"]
    assert doc["findings"][0]["Rule"] == "host-sync" and doc["findings"][0]["Time at stake (ns)"] == 79_000
    render_profiled(ProfiledRun(run_id="r", result=None, profile=None, advice=record), "csv")
    out = capsys.readouterr()
    assert "# findings\nRule,Time at stake (ns),Where,Evidence,Fix,Data\nhost-sync,79000," in out.out
    assert "health:" not in out.err  # the one-line forms are for people (table format)


def test_profiler_overhead_of_one_step_a_side_says_it_has_no_interval() -> None:
    """One measured step a side gives no interval: the check says so, not "95% CI +nan% to +nan%"."""
    nan = float("nan")
    o = Overhead("nsys full", 30.0, nan, nan, "baseline run tiny-base")
    status, evidence = checks(RunFacts(overhead=o))["profiler overhead"]
    assert status == FAIL and "nan" not in evidence
    assert evidence.startswith("nsys full adds +30.0% to the step (no 95% CI: too few measured steps)")


def test_a_busy_machine_during_the_baseline_run_is_said_of_the_baseline(tmp_db: str) -> None:
    """A profiled run's machine check judges its baseline run's load too: the reason says whose it is."""
    store = ResultsStore(tmp_db)
    base, prof = make_result("tiny-base"), make_result("tiny-prof", fwd=1_300_000)
    base.extra["machine"] = MachineLoad(2, 10.0, 1.6, 1.8, 0.02, 0.5).to_dict()
    prof.extra["machine"] = MachineLoad(2, 10.0, 1.9, 1.8, 0.25, 0.5).to_dict()  # load before: our baseline's
    save_run(store, base, experiment="overhead-x")
    save_run(
        store, prof, profiler="nsys", nsys_mode="light", experiment="overhead-x", baseline_run_id="tiny-base"
    )
    status, evidence = checks(stored_facts(store, store.get("tiny-prof")))["machine load"]
    assert status == WARN
    assert evidence == (
        "busy while the run ran: load average 1.60 before on 2 CPUs (the baseline run); other processes took "
        "25% of the CPU time"
    )


def test_advise_of_a_run_whose_export_is_gone_says_what_was_stored_and_refuses_thresholds(
    tmp_db: str, cpu_export, tmp_path
) -> None:
    """The findings stored with a run stand for its export once it is gone: judged then with the default
    thresholds, without the run's record. --threshold cannot judge them again (refused, not ignored under a
    note that states the asked thresholds as those in force), and what the capture alone could not judge
    is not sent back to `harness advise RUN`, the command that printed it."""
    export = tmp_path / "gone.sqlite"
    shutil.copy(cpu_export, export)
    with open_trace(export) as trace:
        record = advice_record(capture_health(trace), advice(trace))
    record["findings"] = as_record(
        [Finding("data-loader", 40_000_000, "forward 100%", "3 loader ranges", "num_workers")]
    )
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-prof"), profiler="nsys", nsys_mode="light", nsys_sqlite=str(export),
               advice=record)  # fmt: skip
    export.unlink()
    refused = runner.invoke(app, ["advise", "tiny-prof", "-t", "data_loading_share=0.9"])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert f"--threshold judges run tiny-prof's capture again, but its export is gone ({export})" in flat(
        refused.stderr
    )
    doc = json.loads(runner.invoke(app, ["advise", "tiny-prof", "--format", "json"]).stdout)
    assert [(r["Rule"], r["Time at stake (ns)"]) for r in doc["findings"]] == [("data-loader", 40_000_000)]
    *needs, cuda = doc["not judged"]  # and the rules that read CUDA, which cpu-train holds none of
    assert [line.split(":")[0] for line in needs] == ["recompile", "optimizer-loop"]
    assert not any("`harness advise RUN` judges it" in line for line in needs)
    assert all("run tiny-prof's export is gone" in line for line in needs)
    assert cuda.startswith("gpu-host-wait, host-sync, ") and cuda.endswith(
        "read CUDA's kernels, copies and runtime calls, and the capture holds none: they had nothing to judge"
    )
    table = runner.invoke(app, ["advise", "tiny-prof"])
    assert table.exit_code == 0 and "data-loader" in table.stdout
    said = flat(table.output)
    assert "(the defaults, which the stored findings were judged by)" in said
    assert "--threshold NAME=VALUE changes them" not in said


def test_advise_of_a_run_without_a_capture_says_no_rule_ran(tmp_db: str) -> None:
    """A run timed without a profiler has nothing for a rule to read: not "no rule fired" (a clean run) with
    exit 0, but no findings, why, and exit 1; --threshold is refused."""
    save_run(ResultsStore(tmp_db), make_result("tiny-plain"))
    for fmt in ("table", "json", "csv"):
        result = runner.invoke(app, ["advise", "tiny-plain", "--format", fmt])
        assert result.exit_code == 1 and result.stdout == "", fmt
        assert "no findings for run tiny-plain: it has no capture to judge, so no rule was run" in flat(
            result.stderr
        )
        assert "no rule fired" not in result.stderr
    refused = runner.invoke(app, ["advise", "tiny-plain", "-t", "host_wait_share=0.2"])
    assert refused.exit_code == 2 and "but it has none (no export or trace)" in flat(refused.stderr)
    health = runner.invoke(app, ["health", "tiny-plain"])  # its own checks stand
    assert health.exit_code == 0 and "profiler overhead" in health.stdout


def test_advise_of_a_planted_run_says_why_its_cause_is_not_found(tmp_db: str, cpu_export) -> None:
    """A cause a CPU capture does not show (pageable-h2d: a host-to-host copy) planted in a run whose capture
    fires nothing: "no rule fired" alone read as a clean step; a note says why the planted cause is not
    there. A run that fixed its cause, or whose cause fired, gets no such note."""
    from harness.core.records import RunConfig

    store = ResultsStore(tmp_db)
    for run_id, fixes in (("planted", []), ("fixed", ["pinned-copies"])):
        result = make_result(run_id)
        result.config = RunConfig(model="tiny", warmup=2, steps=3, plant="pageable-h2d", fixes=fixes)
        save_run(store, result, profiler="nsys", nsys_mode="light", nsys_sqlite=str(cpu_export))
    said = flat(runner.invoke(app, ["advise", "planted"]).output)
    assert "--plant pageable-h2d does not show in a cpu capture" in said
    assert "on a GPU its finding (pageable-copy) brings the fixes for it" in said
    assert "does not show" not in runner.invoke(app, ["advise", "fixed"]).output


def test_a_fix_for_another_cause_leaves_the_planted_causes_note(tmp_db: str, cpu_export) -> None:
    """A run with d2h-copy planted and launch-bound's larger batch applied (`--fix larger-batch -b 8`, as
    optimize stacks it): its copy is still in the step, and the capture shows it no more than the unfixed
    run's; the note was left out for any fix at all."""
    from harness.core.records import RunConfig

    store = ResultsStore(tmp_db)
    result = make_result("other-fix")
    result.config = RunConfig(
        model="tiny", warmup=2, steps=3, batch_size=8, plant="d2h-copy", fixes=["larger-batch"]
    )
    save_run(store, result, profiler="nsys", nsys_mode="light", nsys_sqlite=str(cpu_export))
    said = flat(runner.invoke(app, ["advise", "other-fix"]).output)
    assert "--plant d2h-copy does not show in a cpu capture" in said


def test_a_capture_is_judged_with_the_record_advise_reads_back(tmp_db: str) -> None:
    """What the rules read of a run beside its capture (steps, torch.compile's counters, forward time) is
    the same when the run was just captured as when `advise RUN` reads it back: `run --nsys` judged a
    recompile-a-step run with no record ("none fired") where `advise RUN` found the recompile."""
    from analysis.advice.base import RunRecord
    from analysis.tables.stats_format import NEWEST
    from harness.experiments.advice import run_record
    from harness.profilers.capture import measured

    result = make_result("tiny-recompiles")
    result.extra["dynamo"] = {"frames": 5, "graphs": 5, "graph_breaks": 0, "recompile_limit_hits": 0}
    at_run = measured(result, None, "light", NEWEST, []).record
    store = ResultsStore(tmp_db)
    save_run(store, result)
    read_back = run_record(store, store.get("tiny-recompiles"), store.step_timings(["tiny-recompiles"]))
    forward = sum(1_000_000 + i for i in (2, 3, 4))  # make_result's measured steps 2–4
    assert at_run == read_back == RunRecord(5, 3, result.extra["dynamo"], float(forward))


def test_rules_of_a_stored_run_read_the_export_it_was_captured_into(
    tmp_db: str, a100_export, tmp_path
) -> None:
    """`advise RUN --rule X` told the user to find the run's export, which the stored run names itself."""
    store = ResultsStore(tmp_db)
    save_run(
        store, make_result("tiny-prof"), profiler="nsys", nsys_mode="light", nsys_sqlite=str(a100_export)
    )
    of_run = runner.invoke(app, ["advise", "tiny-prof", "--rule", "cuda-sync-memcpy", "--format", "csv"])
    of_export = runner.invoke(
        app, ["advise", str(a100_export), "--rule", "cuda-sync-memcpy", "--format", "csv"]
    )
    assert of_run.exit_code == 0, of_run.output
    assert of_run.stdout == of_export.stdout
    assert (
        of_run.stdout.splitlines()[1] == "19833582,942633682,Device,Pageable,262.144,1230493,0,1,7,cudaMemcpy"
    )
    save_run(store, make_result("tiny-plain"))
    plain = runner.invoke(app, ["advise", "tiny-plain", "--rule", "cuda-sync-memcpy"])
    assert plain.exit_code == 2 and plain.output == (
        "error: --rule reads an nsys export: run tiny-plain has none (it was not captured with nsys); its "
        "findings: `harness advise tiny-plain`\n"
    )
    gone = tmp_path / "gone.sqlite"
    save_run(store, make_result("tiny-gone"), profiler="nsys", nsys_mode="light", nsys_sqlite=str(gone))
    refused = runner.invoke(app, ["advise", "tiny-gone", "--rule", "cuda-sync-memcpy"])
    assert refused.exit_code == 2
    assert " ".join(refused.output.split()) == (
        f"error: --rule reads run tiny-gone's nsys export, which is gone: {gone} not found"
    )


def test_profiler_overhead_whose_interval_reaches_below_zero_warns() -> None:
    """`run char --nsys` on a busy machine: +88.1% with a 95% CI of -16.0% to +321.3%, one run each. Its
    overhead table said "inconclusive: the noise is larger than the effect" while the health check failed
    it; a mean that the noise could give warns, and says why."""
    o = Overhead("nsys light", 88.1, -16.0, 321.3, "baseline run char-base")
    status, evidence = checks(RunFacts(overhead=o))["profiler overhead"]
    assert status == WARN
    assert evidence == (
        "nsys light adds +88.1% to the step (95% CI -16.0% to +321.3%) against baseline run char-base, one "
        "run each; 20% or more by the means, but the interval reaches below 0: not told from the noise "
        "between runs"
    )
    above = Overhead("nsys light", 88.1, 2.5, 321.3, "b")  # the interval above 0: it fails
    assert checks(RunFacts(overhead=above))["profiler overhead"][0] == FAIL
