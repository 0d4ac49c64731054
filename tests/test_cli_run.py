"""`harness run/sweep/runs/show` as a user types them, including every mistake a user can make."""

from __future__ import annotations

import json

import pytest
import torch
from reading import flat
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import names_a_file
from harness.store.results import ResultsStore
from workloads.plants.catalogue import MAX_LOADER_WORKERS

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def one_line_error(result) -> str:
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_unknown_model_lists_known_ones(tmp_db) -> None:
    result = invoke("run", "huge", "--device", "cpu")
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "unknown model 'huge'" in line and "tiny" in line and "gpt2" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(tmp_db) -> None:
    result = invoke("run", "char", "--device", "cuda")
    assert result.exit_code == 2
    assert "CUDA is not available" in one_line_error(result)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [("--steps", "0", "--steps must be a positive"),
     ("--batch-size", "-1", "--batch-size must be a positive"),
     ("--context-length", "0", "--context-length must be a positive"),
     ("--warmup", "-2", "--warmup must be 0"),
     ("--loader-workers", "-1", "--loader-workers must be 0"),
     ("--loader-workers", str(10**30), f"--loader-workers {10**30} is out of range"),
     ("--loss-every", str(10**30), f"--loss-every {10**30} is out of range")],
)  # fmt: skip
def test_non_positive_sizes(tmp_db, option: str, value: str, message: str) -> None:
    result = invoke("run", "char", "--device", "cpu", option, value)
    assert result.exit_code == 2
    assert message in one_line_error(result)


def test_loader_workers_past_the_most_are_refused_before_the_run(tmp_path) -> None:
    """Each DataLoader worker is a process: `--plant slow-loader --loader-workers 1000000` was taken and
    started forking them."""
    db = tmp_path / "r.sqlite"
    args = ("--plant", "slow-loader", "--loader-workers", str(10**6), "--db", str(db))
    result = invoke("run", "char", "--device", "cpu", *args)
    assert result.exit_code == 2
    assert (
        one_line_error(result) == f"error: --loader-workers must be {MAX_LOADER_WORKERS} or less, got {10**6}"
    )
    assert not db.exists()


def test_bad_database(tmp_path) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("x")
    result = invoke("run", "char", "--device", "cpu", "--db", str(blocker / "d" / "r.sqlite"))
    assert result.exit_code == 1
    assert (
        f"cannot open results database {blocker / 'd' / 'r.sqlite'}: {blocker} is a file, not a folder"
        in (one_line_error(result))
    )  # mkdir said "Not a directory"


@pytest.mark.parametrize("command", [("run", "tiny", "--device", "cpu"), ("runs",), ("show", "latest")])
def test_a_newline_in_a_path_keeps_the_harness_error_one_line(tmp_path, command: tuple[str, ...]) -> None:
    """A path holding a newline split a harness error in two (`error: cannot open results database …/fi`,
    then `le/r.sqlite: …`): its errors are one line, the newline shown as `\\n`, as analysis's are."""
    blocker = tmp_path / "fi\nle"
    blocker.write_text("x")
    result = invoke(*command, "--db", str(blocker / "r.sqlite"))
    assert result.exit_code == 1
    line = one_line_error(result)
    assert line.startswith("error: ") and str(blocker / "r.sqlite").replace("\n", "\\n") in line


def test_show_unknown_run(tmp_db) -> None:
    ResultsStore(tmp_db)
    result = invoke("show", "nope")
    assert result.exit_code == 2
    assert "no run with id 'nope'" in one_line_error(result)


def test_run_then_runs_and_show(tmp_db) -> None:
    result = invoke("run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--format", "json")
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    (title,) = [t for t in tables if t.startswith("run ")]
    row = tables[title][0]
    assert row["size"] == "char" and row["d_model"] == 128 and row["num_layers"] == 4
    assert row["forward mean (ns)"] > 0
    listed = json.loads(invoke("runs", "--format", "json").stdout)
    assert len(listed) == 1 and listed[0]["model"] == "char" and listed[0]["status"] == "ok"
    shown = json.loads(invoke("show", listed[0]["run_id"], "--format", "json").stdout)
    phases = {p["Phase"]: p for p in shown["phases (measured steps)"]}
    assert phases["forward"]["Steps"] == 2
    assert phases["forward"]["Avg (ns)"] == pytest.approx(listed[0]["forward_mean_ns"])
    assert len(shown["steps"]) == 3
    fields = shown["run"]
    assert fields["compile"] is False and fields["batch size"] == 4 and fields["MFU (%)"] is None
    assert fields["parameters"] == listed[0]["params"] > 0


def test_run_prints_the_table(tmp_db) -> None:
    result = invoke("run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--wide")
    assert result.exit_code == 0
    out = result.stdout
    # the seed table's columns (all of them with --wide); headers may wrap at spaces in the terminal
    words = ("size", "d_model", "d_ff", "num_layers", "num_heads", "step", "forward", "backward", "optimizer")
    for word in words:
        assert word in out
    assert out.count("mean") == 4 and out.count("std") == 4 and "(ms)" in out and "(ns)" not in out
    assert "char" in out and "tokens/s" in out


@pytest.mark.slow
def test_sweep_runs_each_point_in_its_own_process(tmp_db) -> None:
    args = ["sweep", "--models", "char", "--precision", "fp32,bf16", "--device", "cpu", "--steps", "2"]
    result = invoke(*args, "--warmup", "1", "--format", "csv")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    # csv carries every column, those alike in every row too (the terminal leaves them out)
    assert lines[0].startswith("size,precision,compile,batch,context,d_model")
    rows = [line.split(",")[:5] for line in lines[1:]]
    assert rows == [["char", "fp32", "False", "4", "64"], ["char", "bf16", "False", "4", "64"]]
    listed = json.loads(invoke("runs", "--format", "json").stdout)
    assert len(listed) == 2 and len({r["experiment"] for r in listed}) == 1
    assert {r["precision"] for r in listed} == {"fp32", "bf16"}


def test_emulated_bf16_on_cpu_is_said() -> None:
    from harness.core.devices import emulated_precision_note

    cpu = torch.device("cpu")
    assert emulated_precision_note(cpu, ["fp32"]) is None
    note = emulated_precision_note(cpu, ["fp32", "bf16", "bf16"])
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert note is None
    else:
        assert note is not None and note.startswith("bf16 on this CPU is emulated")


def test_emulated_bf16_names_backward_only_for_work_that_has_one(monkeypatch) -> None:
    """On a CPU without bf16 units: a training run is warned that backward suffers most; a generate run,
    which has no backward, is warned without it."""
    from harness.core.records import RunConfig
    from harness.execution.checks import checked

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    said = {
        mode: checked(RunConfig(model="tiny", mode=mode, precision="bf16", device="cpu")).warnings
        for mode in ("train", "generate")
    }
    slow = (
        "bf16 on this CPU is emulated (no AVX512-BF16/AMX or FP16 units): expect steps many times slower "
        "than fp32"
    )
    assert said == {"train": [f"{slow}, backward most of all"], "generate": [slow]}


def test_cpu_out_of_memory_is_recorded(tmp_db) -> None:
    # an embedding of 10**12 rows: the CPU allocator refuses at once (as for -t 1000000000, without
    # first filling 16 GB with the batch)
    args = ["run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0", "--vocab-size", str(10**12)]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "warning: out of memory: DefaultCPUAllocator: can't allocate memory" in result.output
    assert "Traceback" not in result.output
    listed = json.loads(invoke("runs", "--format", "json").stdout)
    assert [r["status"] for r in listed] == ["oom"]


@pytest.mark.slow
def test_sweep_goes_on_after_cpu_out_of_memory(tmp_db) -> None:
    args = ["sweep", "--models", "char,tiny", "--device", "cpu", "--steps", "1", "--warmup", "0"]
    result = invoke(*args, "--vocab-size", str(10**12), "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = [line.split(",") for line in result.stdout.strip().splitlines()[1:]]
    assert [(r[0], r[-1]) for r in rows] == [("char", "oom"), ("tiny", "oom")]
    listed = json.loads(invoke("runs", "--format", "json").stdout)
    assert [r["status"] for r in listed] == ["oom", "oom"]


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_and_keeps_the_point(tmp_path) -> None:
    import os
    import signal
    import uuid

    from procs import logged_steps, marked, output, start, wait_until

    from harness.store.results import ResultsStore

    tmp, db, mark = tmp_path / "tmp", tmp_path / "r.sqlite", uuid.uuid4().hex
    tmp.mkdir()
    args = ["sweep", "--models", "char,tiny", "--device", "cpu", "--steps", "100000", "--warmup", "1"]
    proc = start([*args, "-b", "1", "-t", "32", "--db", str(db)], tmp_path, mark, TMPDIR=str(tmp))
    wait_until(lambda: logged_steps(tmp) >= 3, 300, "the first point to measure two steps")
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(120) == 130, output(tmp_path)
    text = flat(output(tmp_path))
    (run,) = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    assert run["model"] == "char" and run["status"] == "interrupted" and run["forward_mean_ns"] > 0
    assert "warning: sweep stopped after 1 of 2 points" in text
    assert f"error: run {run['run_id']} interrupted by SIGINT after " in text and "Traceback" not in text
    assert marked(mark) == [] and list(tmp.glob("harness-*")) == []


def test_sweep_with_a_failed_point_runs_and_stores_every_point_then_exits_1(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank

    made: list[str] = []

    def run(config, run_id=None):  # each point as its fresh process ends it: char fp32 fails, tiny runs OOM
        made.append(f"p-{len(made)}")
        if config.model == "char" and config.precision == "fp32":
            return RunResult(made[-1], config, "error", device="cpu", error="RuntimeError: boom\nmore")
        if config.model == "tiny":
            return RunResult(made[-1], config, "oom", device="cpu", error="CUDA out of memory")
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps)

    monkeypatch.setattr(multirank, "run_any", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "char,tiny", "--precision", "fp32,bf16", "--device", "cpu", "--db", db]
    r = runner.invoke(app, [*args, "--format", "csv"], env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    assert made == ["p-0", "p-1", "p-2", "p-3"]
    rows = [line.split(",") for line in r.stdout.strip().splitlines()[1:]]
    assert [(row[0], row[1], row[-1]) for row in rows] == [
        ("char", "fp32", "error"), ("char", "bf16", "ok"), ("tiny", "fp32", "oom"), ("tiny", "bf16", "oom")
    ]  # fmt: skip
    assert "error: run p-0 ended error: RuntimeError: boom" in r.output and "Traceback" not in r.output
    assert sorted(ResultsStore(db).runs()["status"]) == ["error", "ok", "oom", "oom"]


def test_sweep_names_each_points_run_and_says_its_status_as_runs_does(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep printed no run ids (the runs `show` and `diff` take were not to be found from its output) and
    wrote a point's status upper-case (OOM, ERROR) where `runs` and the database say oom, error: each row
    names its run, in the table, csv and json, and its status is spelled as stored."""
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank

    def run(config, run_id=None):  # char runs, tiny runs out of memory
        if config.model == "tiny":
            return RunResult("tiny-1", config, "oom", device="cpu", error="CUDA out of memory")
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult("char-1", config, "ok", device="cpu", device_name="cpu", steps=steps)

    monkeypatch.setattr(multirank, "run_any", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "char,tiny", "--device", "cpu", "--db", db]
    for fmt in ("json", "csv", "table"):
        r = runner.invoke(app, [*args, "--format", fmt], env={"COLUMNS": "80"})
        assert r.exit_code == 0, r.output
        if fmt == "json":
            rows = json.loads(r.stdout)
        elif fmt == "csv":
            import csv
            import io

            rows = list(csv.DictReader(io.StringIO(r.stdout)))
        else:
            body = [line.split("│") for line in r.stdout.splitlines() if line.startswith("│")]
            header = next(line for line in r.stdout.splitlines() if line.startswith("┃") and "size" in line)
            names = [c.strip() for c in header.split("┃")]
            rows = [dict(zip(names, (c.strip() for c in line), strict=True)) for line in body]
        assert [(row["size"], row["run"], row["status"]) for row in rows] == [
            ("char", "char-1", "ok"), ("tiny", "tiny-1", "oom")
        ], r.stdout  # fmt: skip
        assert "warning: tiny fp32 (run tiny-1) ended oom: CUDA out of memory" in r.stderr
        assert "OOM" not in r.output
    stored = {r["run_id"]: r["status"] for r in json.loads(invoke("runs", "--db", db, "-f", "json").stdout)}
    assert stored == {"char-1": "ok", "tiny-1": "oom"}


def test_sweep_whose_points_run_out_of_memory_exits_0(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core.records import RunResult
    from harness.execution.ranks import multirank

    def run(config, run_id=None):  # out of memory is a result: the configuration does not fit here
        return RunResult(f"p-{config.model}", config, "oom", device="cpu", error="CUDA out of memory")

    monkeypatch.setattr(multirank, "run_any", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    r = runner.invoke(app, ["sweep", "--models", "char,tiny", "--device", "cpu", "--db", db])
    assert r.exit_code == 0, r.output
    assert list(ResultsStore(db).runs()["status"]) == ["oom", "oom"]


def test_bf16_on_a_gpu_without_bf16_tensor_cores_is_said(monkeypatch) -> None:
    """A V100 (compute capability 7.0) or T4 (7.5) runs bf16 without tensor cores: the run is warned, with
    the capability; an A100 (8.0) and fp16 on a V100 are not."""
    from harness.core.devices import emulated_precision_note

    gpu = torch.device("cuda", 0)
    capability = {"cc": (7, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability["cc"])
    note = emulated_precision_note(gpu, ["bf16"])
    assert note is not None and note.startswith("bf16 on this GPU (compute capability 7.0) has no tensor")
    assert emulated_precision_note(gpu, ["fp16", "fp32"]) is None
    capability["cc"] = (7, 5)
    assert "(compute capability 7.5)" in (emulated_precision_note(gpu, ["fp32", "bf16"]) or "")
    capability["cc"] = (8, 0)
    assert emulated_precision_note(gpu, ["bf16"]) is None


def test_a_failed_point_of_a_compile_sweep_is_named_with_its_compile_setting(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sweep --compile off,on`: the warning of a failed point read `char fp32: …` for either point (its
    progress line said `compiled`, its warning did not), so which of the two failed was not said."""
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank

    def run(config, run_id=None):  # the compiled point fails
        if config.compile:
            return RunResult("p-on", config, "error", device="cpu", error="RuntimeError: boom")
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult("p-off", config, "ok", device="cpu", device_name="cpu", steps=steps)

    monkeypatch.setattr(multirank, "run_any", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "char", "--compile", "off,on", "--device", "cpu", "--db", db]
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    warned = [line for line in r.stderr.splitlines() if "boom" in line and line.startswith("warning")]
    assert warned == ["warning: char fp32 compiled (run p-on) ended error: RuntimeError: boom"], r.stderr


@pytest.mark.parametrize("command", ["show", "blocks", "roofline"])
def test_a_file_given_where_a_run_is_taken_is_said_to_be_a_file(tmp_db, tmp_path, command: str) -> None:
    """`show report.sqlite` said only "no run with id 'report.sqlite'", as if a run had that id: a file
    named where a stored run is taken is said to be a file, the commands that take either read it as one."""
    ResultsStore(tmp_db)
    export = tmp_path / "report.sqlite"
    export.write_bytes(b"")
    for given in (str(export), "missing.nsys-rep"):
        result = invoke(command, given)
        assert result.exit_code == 2
        line = one_line_error(result)
        assert line.startswith(f"error: {given!r} names a file, and this command reads a stored run"), line


def test_a_run_reference_and_a_file_are_told_apart_by_one_rule(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept").write_text("x")
    assert names_a_file("kept") and names_a_file("a/b") and names_a_file("trace.json.gz")
    assert names_a_file("report.qdrep") and names_a_file("x.sqlite")
    assert not names_a_file("tiny-20261130-183859-32058495") and not names_a_file("latest")
    assert not names_a_file("bad\x00name") and not names_a_file("-1") and not names_a_file("")
