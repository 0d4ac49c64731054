"""What users look for first: the step time beside the phases, `latest` and -N wherever a run
id goes, what `runs` says when a filter matches nothing, warnings wrapped on a terminal only."""

from __future__ import annotations

import io
import json
import re
import sys

import pandas as pd
import pytest
from conftest import measure_drift
from test_store import make_result
from typer.testing import CliRunner

from harness.cli import app
from harness.experiments.run_tables import results_table
from harness.experiments.show import phase_table
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def three(tmp_db: str) -> ResultsStore:
    store = ResultsStore(tmp_db)
    for run_id, fwd in (("tiny-old", 1_000_000), ("tiny-mid", 2_000_000), ("tiny-new", 3_000_000)):
        save_run(store, make_result(run_id, fwd=fwd))
    return store


def test_step_time_is_the_sum_of_the_phases_beside_them() -> None:
    # make_result: measured steps 2, 3, 4 with forward f+i, backward 2f+i, optimizer f//2 (f = 1 ms)
    table = results_table([make_result("tiny-1")])
    steps = [1_000_000 + i + 2_000_000 + i + 500_000 for i in (2, 3, 4)]
    assert table.loc[0, "step mean (ns)"] == sum(steps) / 3 == 3_500_006
    assert table.loc[0, "step std (ns)"] == pytest.approx(2.0)  # 3,500,004, 3,500,006, 3,500,008
    means = [c for c in table.columns if c.endswith("mean (ns)")]
    assert means == ["step mean (ns)", "forward mean (ns)", "backward mean (ns)", "optimizer mean (ns)"]
    priority = table.attrs["priority"]
    assert priority.index("step mean (ns)") < priority.index("forward mean (ns)")  # kept first when narrow


def test_show_puts_the_step_first(three: ResultsStore) -> None:
    phases = phase_table(three.get("tiny-old")).set_index("Phase")
    assert list(phases.index) == ["step (sum)", "forward", "backward", "optimizer"]
    assert phases.loc["step (sum)", "Avg (ns)"] == 3_500_006  # (3,500,004 + 3,500,006 + 3,500,008) / 3
    assert phases.loc["step (sum)", "Min (ns)"] == 3_500_004 and phases.loc["step (sum)", "Steps"] == 3
    result = invoke("show", "tiny-old", "--format", "json")
    assert result.exit_code == 0
    shown = json.loads(result.stdout)["phases (measured steps)"]
    assert shown[0]["Phase"] == "step (sum)" and shown[0]["Avg (ns)"] == 3_500_006


@pytest.mark.parametrize(
    ("ref", "expected"), [("latest", "tiny-new"), ("-1", "tiny-new"), ("-3", "tiny-old")]
)
def test_latest_and_counted_from_the_newest(three: ResultsStore, ref: str, expected: str) -> None:
    assert three.resolve(ref) == expected
    result = invoke("show", ref, "--format", "json")  # -N is a run, not an unknown option
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["run"]
    assert run["run"] == expected


def test_past_the_oldest_run_is_one_line(three: ResultsStore) -> None:
    result = invoke("show", "-4")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: no run '-4': the results database holds 3 runs; `harness runs` lists them"
    )


@pytest.mark.parametrize("back", ["9223372036854775808", "99999999999999999999"])
@pytest.mark.parametrize("command", [["show"], ["health"], ["diff", "-1"]])
def test_counted_back_past_what_the_database_counts_is_one_line(
    three: ResultsStore, command: list[str], back: str
) -> None:
    """An offset past 64 bits failed in the database driver (OverflowError, a traceback) in every command
    that takes a run: it is past the oldest run, said as -4 is."""
    result = invoke(*command[:1], f"-{back}", *command[1:])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: no run '-{back}': the results database holds 3 runs; `harness runs` lists them"
    )


def test_a_misspelt_option_is_still_refused_beside_a_run_reference(three: ResultsStore) -> None:
    result = invoke("show", "-1", "--formt", "json")
    assert result.exit_code == 2 and "No such option: --formt" in result.output


def test_every_run_command_takes_latest_and_minus_n(three: ResultsStore) -> None:
    diff = invoke("diff", "-3", "latest", "--format", "json")
    assert diff.exit_code == 0, diff.output
    assert "tiny-old" in diff.stdout and "tiny-new" in diff.stdout
    tag = invoke("baseline", "tag", "before", "-2")
    assert tag.exit_code == 0 and tag.stdout.strip() == "baseline:before = tiny-mid"


def test_several_runs_a_side_counted_from_the_newest_are_runs_not_options(three: ResultsStore) -> None:
    diff = invoke("diff", "-3,-2", "-1", "--format", "json")
    assert diff.exit_code == 0, diff.output
    assert "tiny-old,tiny-mid" in diff.stdout and "tiny-new" in diff.stdout
    empty = invoke("diff", "-3,", "-1")  # an empty one among them: the diff's own line, not "No such option"
    assert empty.exit_code == 2 and "none empty" in empty.output


def test_runs_with_a_filter_that_matches_nothing_names_it(three: ResultsStore) -> None:
    result = invoke("runs", "--model", "nomatch")
    assert result.exit_code == 0
    assert (
        "no run matches --model nomatch (3 runs in the results database; `harness runs` lists them)"
        in result.output
    )
    assert "no runs yet" not in result.output


@pytest.mark.parametrize("command", ["runs", "compare-compile"])
def test_a_device_filter_no_run_can_have_is_refused(three: ResultsStore, command: str) -> None:
    """`--device gpu` matched nothing and said only that no run matched: the device types are named."""
    result = invoke(command, "--device", "gpu")
    assert result.exit_code == 2
    assert "'gpu' is not one of 'cpu', 'cuda', 'mps'" in result.output
    assert invoke("runs", "--device", "cpu", "--format", "json").exit_code == 0


@pytest.mark.parametrize(("option", "given", "known"), [
    ("--precision", "FP32", "'fp32', 'bf16', 'fp16'"),
    ("--precision", "fp64", "'fp32', 'bf16', 'fp16'"),
    ("--device", "CPU", "'cpu', 'cuda', 'mps'"),
])  # fmt: skip
def test_a_filter_value_outside_the_stored_vocabulary_is_refused_naming_it(
    three: ResultsStore, option: str, given: str, known: str
) -> None:
    """`runs --precision FP32` matched nothing, where the runs are stored fp32: precision, like the device
    type, is a fixed vocabulary, and a value outside it is refused with the values it holds, as `run`
    refuses it; the stored spelling lists the runs."""
    result = invoke("runs", option, given)
    assert result.exit_code == 2
    assert f"'{given}' is not one of {known}" in result.output
    listed = invoke("runs", option, given.lower().replace("fp64", "fp32"), "--format", "json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["tiny-old", "tiny-mid", "tiny-new"]


def test_a_programs_runs_are_listed_by_the_precision_runs_shows_them_with(three: ResultsStore) -> None:
    """`harness profile -- CMD` stores its run's precision as n/a, and `harness runs` lists it so, but
    `runs --precision n/a` was refused ("'n/a' is not one of 'fp32', 'bf16', 'fp16'"): the value `runs`
    shows lists those runs, and only them."""
    from harness.core.records import RunResult
    from harness.experiments.program import program_config

    save_run(
        three,
        RunResult("prog-1", program_config("prog"), "ok", device="n/a"),
        profiler="nsys",
        nsys_mode="light",
    )
    listed = {r["run_id"]: r["precision"] for r in json.loads(invoke("runs", "--format", "json").stdout)}
    assert listed["prog-1"] == "n/a"  # as runs shows it
    result = invoke("runs", "--precision", "n/a", "--format", "json")
    assert result.exit_code == 0, result.output
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["prog-1"]
    table = invoke("runs", "--precision", "n/a", "--wide")
    assert table.exit_code == 0 and "prog-1" in table.stdout and "tiny-new" not in table.stdout
    fp32 = invoke("runs", "--precision", "fp32", "--format", "json")
    assert [r["run_id"] for r in json.loads(fp32.stdout)] == ["tiny-old", "tiny-mid", "tiny-new"]


def test_a_programs_runs_are_listed_by_the_device_runs_shows_them_with(three: ResultsStore) -> None:
    """A program's run is stored and listed with device n/a, as with precision n/a: `runs --device n/a`
    lists those runs (it was refused: "'n/a' is not one of 'cpu', 'cuda', 'mps'")."""
    from harness.core.records import RunResult
    from harness.experiments.program import program_config

    save_run(
        three,
        RunResult("prog-1", program_config("prog"), "ok", device="n/a"),
        profiler="nsys",
        nsys_mode="light",
    )
    listed = {r["run_id"]: r["device"] for r in json.loads(invoke("runs", "--format", "json").stdout)}
    assert listed["prog-1"] == "n/a"
    result = invoke("runs", "--device", "n/a", "--format", "json")
    assert result.exit_code == 0, result.output
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["prog-1"]


def test_runs_on_an_empty_database_says_no_runs_yet(tmp_db: str) -> None:
    ResultsStore(tmp_db)
    assert "no runs yet" in invoke("runs").output


def test_runs_that_match_nothing_draw_no_empty_table(three: ResultsStore) -> None:
    result = invoke("runs", "--model", "nomatch")
    assert result.output.strip().splitlines() == [
        "note: no run matches --model nomatch (3 runs in the results database; `harness runs` lists them)"
    ]
    assert invoke("runs", "--model", "nomatch", "--format", "json").stdout.strip() == "[]"


def _stderr_of(monkeypatch: pytest.MonkeyPatch, tty: bool, message: str) -> str:
    from harness.cli.common import warn

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    warn(message)
    return stream.getvalue()


def test_warnings_wrap_on_a_terminal_and_stay_whole_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    message = "the machine was busy: " + " ".join(f"word{i}" for i in range(30))
    piped = _stderr_of(monkeypatch, False, message)
    assert piped == f"warning: {message}\n"
    shown = _stderr_of(monkeypatch, True, message)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in shown.splitlines()]
    assert len(lines) >= 3 and max(len(line) for line in lines) <= 80
    # the lines after the first indented under the message, as a table's notes
    assert all(line.startswith(" " * len("warning: ")) for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == f"warning: {message}"


def test_cpu_memory_is_labelled_rss_and_an_allocator_keeps_its_labels() -> None:
    from harness.experiments.run_tables import memory_rows

    mib = 2**20
    cpu = memory_rows(
        {"peak_rss_bytes": 900 * mib, "breakdown": {"parameters": 463 * mib, "total": 463 * mib}}
    )
    assert list(cpu["memory"]) == ["peak RSS (process)", "analytic: parameters", "analytic: total"]
    assert list(cpu["MiB"]) == [900, 463, 463]
    # a CPU run stored before: its RSS sat under peak_allocated_bytes; shown as what it is
    old = memory_rows({"peak_allocated_bytes": 900 * mib, "peak_source": "process peak resident set (no …)"})
    assert list(old["memory"]) == ["peak RSS (process)"] and list(old["MiB"]) == [900]
    cuda = memory_rows({"peak_allocated_bytes": 512 * mib, "peak_reserved_bytes": 600 * mib})
    assert list(cuda["memory"]) == ["peak allocated", "peak reserved"] and list(cuda["MiB"]) == [512, 600]


def test_show_prints_report_paths_whole_on_their_own_line(tmp_db: str, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    deep = tmp_path / ("a-long-folder-name-" * 4) / "nsys_profiles" / "tiny-20261125-080209-346f.sqlite"
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-prof"), profiler="nsys", nsys_mode="light", nsys_sqlite=str(deep))
    assert len(str(deep)) > 80
    out = invoke("show", "tiny-prof").stdout
    lines = out.splitlines()
    assert str(deep) in [line.strip() for line in lines]  # the whole path, alone on its line
    assert "note: nsys sqlite:" in out
    assert not any(str(deep)[:30] in line and line.strip() != str(deep) for line in lines)
    doc = json.loads(invoke("show", "tiny-prof", "--format", "json").stdout)  # scripts keep it in the table
    assert doc["run"]["nsys sqlite"] == str(deep)


def test_diff_of_two_runs_as_one_tidy_csv(three: ResultsStore) -> None:
    measure_drift(three, make_result("aa", fwd=5_000_000))  # one run a side: judged against the drift
    result = invoke("diff", "tiny-old", "tiny-mid", "--format", "csv")
    assert result.exit_code == 0, result.output
    tidy = pd.read_csv(io.StringIO(result.stdout))
    assert tidy.columns[0] == "table" and tidy["table"].nunique() == 1
    verdicts = tidy.set_index("Phase")
    # tiny-mid's phases take twice tiny-old's: forward 2,000,003 against 1,000,003 ns on average
    assert verdicts.loc["forward", ["Verdict", "Mean A (ns)", "Mean B (ns)"]].tolist() == [
        "regression",
        1_000_003,
        2_000_003,
    ]
    assert verdicts.loc["overall (step)", ["Mean A (ns)", "Mean B (ns)"]].tolist() == [3_500_006, 7_000_006]


SMALL_RUN = [
    "--device",
    "cpu",
    "--batch-size",
    "2",
    "--context-length",
    "16",
    "--warmup",
    "1",
    "--steps",
    "2",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "label"),
    [
        (["--profiler", "torch", "--profile-dir", "{tmp}"], "char train under torch.profiler"),
        (["--nproc", "2"], "char train across 2 ranks"),
    ],
)
def test_runs_in_other_processes_count_their_steps(
    tmp_db: str, tmp_path, args: list[str], label: str
) -> None:
    result = invoke("run", "char", *SMALL_RUN, *(a.format(tmp=tmp_path) for a in args))
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if line.startswith("progress: ")]
    # piped: a line at the first step counted and at the last (a bar on a terminal)
    assert any(label in line and "3/3 steps" in line for line in progress), progress
    said = [line.rsplit(" [", 1)[0] for line in progress]  # each count said once (0/3 was said twice)
    assert len(said) == len(set(said)), progress


@pytest.mark.parametrize("ref", ["", " "])
def test_an_empty_run_reference_names_no_run(tmp_db: str, ref: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-only"))  # an empty prefix matched it: `show ""` showed the only run
    result = invoke("show", ref)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: the run id is empty: give an id, a unique prefix, `latest`, or -1, -2, …"
    )


@pytest.mark.parametrize(
    "args", [["advise", ""], ["health", ""], ["advise", "-r", "gpu_gaps", ""], ["diff", "", "tiny-only"]]
)
def test_an_empty_run_reference_is_no_folder(tmp_db: str, args: list[str]) -> None:
    """The commands that take a run id or a file read an empty argument as an empty run id, not as the
    current folder (which Path("") is)."""
    save_run(ResultsStore(tmp_db), make_result("tiny-only"))
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: the run id is empty: give an id, a unique prefix, `latest`, or -1, -2, …"
    )
