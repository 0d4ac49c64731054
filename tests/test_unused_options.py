"""An option given where it changes nothing is refused in one line (exit 2) or, where a reasonable script
keeps it, warned of; the same option where it does change something passes without a word. A bad --db
stops a command right after these checks (exit 1, before any work; a capture's nsys is checked before the
database), so each case runs nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import need
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()
RUN = ("run", "tiny", "--device", "cpu")

# (command line, its one line, exit status, the command line where the same option has an effect)
CASES = [
    ([*RUN, "--node-rank", "1"],
     "error: --node-rank places this machine among --nnodes machines; with --nnodes 1 it is 0", 2,
     [*RUN, "--node-rank", "1", "--nnodes", "2", "--rdzv-endpoint", "node0:29500"]),
    ([*RUN, "--rank-timeout", "10"],
     "warning: --rank-timeout is for runs across ranks; this run is one process (--nproc 1): it changes "
     "nothing", 1, [*RUN, "--rank-timeout", "10", "--nproc", "2"]),
    ([*RUN, "--rdzv-endpoint", "node0:29500"],
     "warning: --rdzv-endpoint is for runs across ranks; this run is one process (--nproc 1): it changes "
     "nothing", 1, [*RUN, "--rdzv-endpoint", "node0:29500", "--nproc", "2"]),
    ([*RUN, "--pin-memory"],
     "error: --pin-memory changes the step of --plant pageable-h2d or d2h-copy; this run plants nothing", 2,
     None),
    ([*RUN, "--plant", "d2h-copy", "--pin-memory"],
     "error: --pin-memory pins copies to a CUDA device; this run is on cpu: it changes nothing", 2, None),
    ([*RUN, "--loss-every", "3"],
     "error: --loss-every changes the step of --plant host-sync; this run plants nothing", 2,
     [*RUN, "--loss-every", "3", "--plant", "host-sync"]),
    ([*RUN, "--loader-workers", "2", "--plant", "host-sync"],
     "error: --loader-workers changes the step of --plant slow-loader; this run plants host-sync", 2,
     [*RUN, "--loader-workers", "2", "--plant", "slow-loader"]),
    ([*RUN, "--dynamic-shapes"],
     "error: --dynamic-shapes changes the step of --plant recompile; this run plants nothing", 2,
     [*RUN, "--dynamic-shapes", "--plant", "recompile"]),
    ([*RUN, "--plant", "launch-bound", "-b", "8"],
     "error: --plant launch-bound sets --batch-size 1 (the cause it plants): leave it out", 2,
     [*RUN, "-b", "8"]),
    ([*RUN, "--fix", "larger-batch", "-b", "8"],
     "error: --fix lets a fix change what --plant sets; this run plants nothing: leave it out", 2,
     [*RUN, "--fix", "larger-batch", "-b", "8", "--plant", "launch-bound"]),
    ([*RUN, "--plant", "host-sync", "--fix", "loader-workers"],
     "error: --fix loader-workers changes nothing here: --plant host-sync does not set --loader-workers and "
     "this run has it at 0, its default; give --loader-workers another value, or leave --fix loader-workers "
     "out", 2,
     [*RUN, "--plant", "slow-loader", "--fix", "loader-workers", "--loader-workers", "2"]),
    ([*RUN, "--plant", "launch-bound", "--fix", "compile"],
     "error: --fix compile changes nothing here: --plant launch-bound does not set --compile and this run "
     "leaves it off; give --compile too, or leave --fix compile out", 2,
     [*RUN, "--plant", "launch-bound", "--fix", "larger-batch"]),  # the plant's batch 1 lifted
    # the plant's own value given with its fix: stored as fixed, its step the plant's as it is
    ([*RUN, "--plant", "launch-bound", "--fix", "larger-batch", "-b", "1"],
     "error: --fix larger-batch changes nothing here: --plant launch-bound sets --batch-size 1 and this run "
     "gives it 1 too; give --batch-size another value, or leave --fix larger-batch out", 2,
     [*RUN, "--plant", "launch-bound", "--fix", "larger-batch", "-b", "2"]),
    ([*RUN, "--plant", "host-sync", "--fix", "drop-item", "--loss-every", "1"],
     "error: --fix drop-item changes nothing here: --plant host-sync does not set --loss-every and this run "
     "has it at 1, its default; give --loss-every another value, or leave --fix drop-item out", 2,
     [*RUN, "--plant", "host-sync", "--fix", "drop-item", "--loss-every", "4"]),
    # the default given: "give --attention too" said to a run that gave it
    ([*RUN, "--plant", "host-sync", "--fix", "sdpa", "--attention", "sdpa"],
     "error: --fix sdpa changes nothing here: --plant host-sync does not set --attention and this run has it "
     "at sdpa, its default; give --attention another value, or leave --fix sdpa out", 2,
     [*RUN, "--plant", "host-sync", "--fix", "sdpa", "--attention", "math"]),
    ([*RUN, "--plant", "optimizer-loop", "--optimizer", "fused"],
     "error: --plant optimizer-loop sets --optimizer loop (the cause it plants): leave it out", 2,
     [*RUN, "--optimizer", "fused"]),
    ([*RUN, "--mode", "generate", "--optimizer", "fused"],
     "error: --optimizer picks AdamW's implementation; --mode generate runs no optimizer", 2,
     [*RUN, "--mode", "train", "--optimizer", "fused"]),
    ([*RUN, "--new-tokens", "8"],
     "error: --new-tokens counts what generate decodes; --mode train decodes nothing", 2,
     [*RUN, "--new-tokens", "8", "--mode", "generate"]),
    # the default's value given is as much a generate option (or a train one) as any other
    ([*RUN, "--new-tokens", "32"],
     "error: --new-tokens counts what generate decodes; --mode train decodes nothing", 2,
     [*RUN, "--new-tokens", "32", "--mode", "generate"]),
    ([*RUN, "--mode", "generate", "--optimizer", "auto"],
     "error: --optimizer picks AdamW's implementation; --mode generate runs no optimizer", 2,
     [*RUN, "--optimizer", "auto"]),
    (["sweep", "--models", "tiny", "--device", "cpu", "--new-tokens", "32"],
     "error: --new-tokens counts what generate decodes; --mode train decodes nothing", 2,
     ["sweep", "--models", "tiny", "--device", "cpu", "--new-tokens", "32", "--mode", "generate"]),
    ([*RUN, "--power-period", "10"],
     "error: --power-period is --power's sampling period: give --power too, or leave it out", 2,
     [*RUN, "--power-period", "10", "--power"]),
    ([*RUN, "--nsys-capture", "measured"],
     "error: --nsys-capture is for nsys; this run has no profiler: give --nsys", 2,
     [*RUN, "--nsys-capture", "measured", "--nsys"]),
    ([*RUN, "--nsys-mode", "full", "--nsys-arg=--trace=cuda", "--no-nsys-baseline", "--profiler", "torch"],
     "error: --nsys-mode, --nsys-arg, --no-nsys-baseline are for nsys; this run has --profiler torch: give "
     "--nsys", 2,
     [*RUN, "--nsys-mode", "full", "--nsys-arg=--trace=cuda", "--no-nsys-baseline", "--nsys"]),
    ([*RUN, "--nsys-path", "/opt/nsys", "--nsys-force"],
     "error: --nsys-path, --nsys-force are for nsys; this run has no profiler: give --nsys", 2,
     [*RUN, "--nsys-path", "/opt/nsys", "--nsys-force", "--profiler", "nsys"]),
    ([*RUN, "--profile-dir", "profiles"],
     "error: --profile-dir is where a profiler's (or --memory's) files go; this run writes none", 2,
     [*RUN, "--profile-dir", "profiles", "--profiler", "torch"]),
    # a compiled run gets no block timers, and no profiler records the ranges
    ([*RUN, "--nvtx-detail", "--compile"],
     "error: --nvtx-detail with --compile times no block (hooks would break the compiled graph), and "
     "without a profiler nothing records its ranges: give --nsys or --profiler torch, or leave it out", 2,
     [*RUN, "--nvtx-detail", "--compile", "--nsys"]),
    # --memory off CUDA keeps torch.profiler's operator table with the run: no file, no folder
    ([*RUN, "--memory", "--profile-dir", "profiles"],
     "error: --profile-dir is where a profiler's (or --memory's) files go; this run writes none (--memory on "
     "cpu keeps its operator table with the run)", 2,
     [*RUN, "--memory", "--profile-dir", "profiles", "--nsys"]),
    (["sweep", "--models", "tiny", "--device", "cpu", "--batch-size", "8", "--batch-sizes", "1,2"],
     "error: --batch-sizes gives the batch sizes swept: leave --batch-size out", 2,
     ["sweep", "--models", "tiny", "--device", "cpu", "--batch-size", "8"]),
    # the default's value given (-b 4) is as much a conflict as any other
    (["sweep", "--models", "tiny", "--device", "cpu", "--batch-sizes", "1,2", "-b", "4"],
     "error: --batch-sizes gives the batch sizes swept: leave --batch-size out", 2,
     ["sweep", "--models", "tiny", "--device", "cpu", "--batch-sizes", "1,2"]),
    (["sweep", "--models", "tiny", "--device", "cpu", "--loss-every", "3"],
     "error: --loss-every changes the step of --plant host-sync; this run plants nothing", 2,
     ["sweep", "--models", "tiny", "--device", "cpu", "--loss-every", "3", "--plant", "host-sync"]),
    (["overhead", "tiny", "--device", "cpu", "--max-time", "30"],
     "error: --max-time bounds the rounds --ci-target adds: give --ci-target, or leave it out", 2,
     ["overhead", "tiny", "--device", "cpu", "--max-time", "30", "--ci-target", "5"]),
    # the default's value given (light) is as much an nsys option as full
    (["overhead", "tiny", "--device", "cpu", "--profiler", "torch", "--nsys-mode", "light"],
     "error: --nsys-mode, --nsys-arg and --nsys-capture are for --profiler nsys", 2,
     ["overhead", "tiny", "--device", "cpu", "--nsys-mode", "light"]),
    (["overhead", "tiny", "--device", "cpu", "--new-tokens", "8"],
     "error: --new-tokens counts what generate decodes; --mode train decodes nothing", 2,
     ["overhead", "tiny", "--device", "cpu", "--new-tokens", "8", "--mode", "generate"]),
    (["optimize", "tiny", "--device", "cpu", "--mode", "forward", "--optimizer", "fused"],
     "error: --optimizer picks AdamW's implementation; --mode forward runs no optimizer", 2,
     ["optimize", "tiny", "--device", "cpu", "--optimizer", "fused"]),
    (["optimize", "missing.sqlite", "-b", "8", "--budget", "60"],
     "error: --batch-size, --budget: of an export or a stored run the findings are read, nothing is run "
     "(run options go with a MODEL)", 2, None),
    (["advise", "latest", "--rule", "gpu-starv", "-t", "host_wait_share=0.2", "--ignore-health"],
     "error: --threshold, --ignore-health: for the findings; --rule prints nsys's rules, which take their "
     "options in nsys's syntax (gpu-low-util:threshold=50)", 2,
     ["advise", "latest", "-t", "host_wait_share=0.2", "--ignore-health"]),
]  # fmt: skip


def lines(result) -> list[str]:
    assert "Traceback" not in result.output
    return [line for line in result.output.strip().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("args", "line", "status", "effective"), CASES, ids=[" ".join(case[0][1:]) for case in CASES]
)
def test_an_option_that_changes_nothing_is_refused_or_warned(
    tmp_path, args: list[str], line: str, status: int, effective: list[str] | None
) -> None:
    bad_db = tmp_path / "file"
    bad_db.write_text("x")  # a folder that is a file: the command stops right after its checks, exit 1
    db = ["--db", str(bad_db / "r.sqlite")]
    result = runner.invoke(app, [*args, *db], catch_exceptions=False)
    assert result.exit_code == status, result.output
    if status == 2:
        assert lines(result) == [line]
    else:  # warned, then on to the store
        assert lines(result)[0] == line
        assert lines(result)[1].startswith("error: cannot open results database")
    if effective is None:
        return
    result = runner.invoke(app, [*effective, *db], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    # past the options' checks: stopped by the bad --db, or first, for a capture, by the nsys it names (or,
    # on a machine without one, by none found)
    after_checks = ("error: cannot open results database", "error: no results database", "error: nsys ")
    assert [x for x in lines(result) if not x.startswith(after_checks)] == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned copies change a CUDA run only")
def test_pin_memory_passes_where_it_pins(tmp_path) -> None:
    bad_db = tmp_path / "file"
    bad_db.write_text("x")
    args = ["run", "tiny", "--device", "cuda", "--plant", "d2h-copy", "--pin-memory"]
    result = runner.invoke(app, [*args, "--db", str(bad_db / "r.sqlite")], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert [x for x in lines(result) if not x.startswith("error: cannot open results database")] == []


CPU_EXPORT = str(
    Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys" / "cpu-train" / "report.sqlite"
)


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize(
    "command",
    [["nvtx", CPU_EXPORT], ["diff", CPU_EXPORT, CPU_EXPORT]],
    ids=["nvtx", "diff"],
)
def test_wide_with_a_format_for_scripts_is_warned_of_once_and_changes_nothing(
    command: list[str], fmt: str
) -> None:
    """--wide fits tables to the terminal; csv and json hold every column whole already. A script that
    switches --format keeps the rest of its line, so it is warned of (once, on stderr, either order), not
    refused; the output is the same byte for byte; with the table format, nothing is said."""
    need(Path(CPU_EXPORT))
    line = (
        f"warning: --wide fits tables to the terminal; --format {fmt} writes every column and name whole: it "
        "changes nothing"
    )
    plain = runner.invoke(app, [*command, "--format", fmt], catch_exceptions=False)
    assert plain.exit_code == 0 and "--wide" not in plain.stderr
    for order in (["--wide", "--format", fmt], ["--format", fmt, "--wide"]):
        wide = runner.invoke(app, [*command, *order], catch_exceptions=False)
        assert wide.exit_code == 0, wide.output
        assert wide.stderr.splitlines().count(line) == 1 and wide.stderr.startswith(line)
        assert wide.stdout == plain.stdout
    table = runner.invoke(app, [*command, "--wide"], env={"COLUMNS": "120"}, catch_exceptions=False)
    assert table.exit_code == 0 and "--wide" not in table.stderr


def test_memory_profile_dir_on_auto_is_warned_where_it_writes_nothing() -> None:
    """--device auto keeps a script's --profile-dir on a machine without a GPU: there --memory writes no
    snapshot, and the folder is warned of, not refused; on CUDA it is where the snapshot goes."""
    from harness.execution.checks import check_profiler_effect

    line = (
        "--profile-dir is where a profiler's (or --memory's) files go; this run writes none (--memory on cpu "
        "keeps its operator table with the run): it changes nothing"
    )
    given = {"profile_dir"}
    assert check_profiler_effect(None, {"profile_dir"}, given, True, "cpu", auto=True) == [line]
    assert check_profiler_effect(None, {"profile_dir"}, given, True, "cuda", auto=True) == []
    assert check_profiler_effect(None, {"profile_dir"}, given, True, "cuda") == []
