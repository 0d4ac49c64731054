"""`harness import` under attack: edited copies of a real harness-unsaved-*.json
(tests/data/harness-unsaved-char.json: a `harness run char` whose save found the database locked). Every
field is checked as `harness run` writes it: a bad one is one line naming the field, and nothing is
stored. A stored run is never replaced unless --replace, which says what it replaced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack(saves=True)
runner = CliRunner()
REAL = Path(__file__).parent / "data" / "harness-unsaved-char.json"
RUN_ID = "char-20261127-101937-51e2"


def edited(tmp_path: Path, where: str, value: Any, name: str = "e.json") -> Path:
    """A copy of the real file with the field at `where` (dots; list items by number) set to `value`."""
    data = json.loads(REAL.read_text())
    keys = where.split(".")
    node = data
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    out = tmp_path / name
    out.write_text(json.dumps(data))  # NaN as JSON's NaN, as json.dumps writes it
    return out


def invoke(*args: str | Path, db: Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["import", *map(str, args), "--db", str(db)])


def one_error(result, needle: str) -> str:  # type: ignore[no-untyped-def]
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit | None), result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.output
    return lines[0]


def stored(db: Path) -> dict[str, list[int]]:
    """The runs in `db` and their forward times, in step order."""
    store = ResultsStore(str(db), readonly=True)
    ids = list(store.runs()["run_id"])
    if not ids:
        return {}
    steps = store.step_timings(ids)
    fwd = steps[steps["phase"] == "forward"].sort_values(["run_id", "step"])
    return {i: fwd[fwd["run_id"] == i]["duration_ns"].tolist() for i in ids}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    ResultsStore(str(path))  # created, empty
    return path


CASES = [
    ("result.steps.1.phases.forward", float("nan"), "steps[1].phases.forward is nan, not a whole number"),
    ("result.steps.1.phases.forward", "fast", "steps[1].phases.forward is 'fast', not a whole number"),
    ("result.steps.1.phases.forward", 1e300, "steps[1].phases.forward is 1e+300, not a whole number"),
    ("result.steps.1.phases.forward", 10**30, "steps[1].phases.forward is 1000000000000000000000000000000"),
    ("result.steps.1.phases.forward", -5, "steps[1].phases.forward is -5, outside 0..4611686018427387904"),
    ("result.steps.1.phases.forward", True, "steps[1].phases.forward is True, not a whole number"),
    ("result.steps.1.phases.walk", 5, "steps[1].phases: phase is 'walk', not one of forward, backward"),
    ("result.steps.1.rank", 3, "steps[1].rank is 3, outside 0..0"),
    ("result.steps.1.warmup", "no", "steps[1].warmup is 'no', not true or false"),
    ("result.status", "weird", "status is 'weird', not one of ok, degraded, oom, error, interrupted"),
    ("result.run_id", "../../etc/evil\x1b[31m", "run_id is '../../etc/evil\\x1b[31m': it holds control"),
    ("result.run_id", "../../etc/evil", "run_id is '../../etc/evil': it holds a folder separator"),
    ("result.run_id", "a\\b", "it holds a folder separator"),
    ("result.run_id", "r\u202eun", "it holds control characters"),
    ("result.run_id", "", "run_id is empty"),
    ("result.run_id", "x" * 300, "run_id is longer than 255 bytes"),
    ("result.run_id", 5, "run_id is 5, not text"),
    ("result.config.mode", "fly", "config.mode is 'fly', not one of train, forward, generate, program"),
    ("result.config.precision", "fp8", "config.precision is 'fp8'"),
    ("result.config.batch_size", 0, "config.batch_size is 0, outside 1.."),
    ("result.config.steps", -1, "config.steps is -1"),
    ("result.config.rank_timeout", float("inf"), "config.rank_timeout is inf, not a finite number"),
    ("result.config.surprise", 1, "config holds fields the harness does not write: 'surprise'"),
    ("result.config.plant", "slow-disk", "config.plant is 'slow-disk', not one of clean, host-sync"),
    ("result.tokens_per_s", -1, "tokens_per_s is -1, below 0"),
    ("result.tokens_per_s", float("nan"), "tokens_per_s is nan, not a finite number"),
    ("result.tokens_per_s", "fast", "tokens_per_s is 'fast', not a finite number"),
    ("result.achieved_flops", 1e300, "achieved_flops is 1e+300, not a finite number"),
    ("result.peak_memory_bytes", -1, "peak_memory_bytes is -1"),
    ("result.model.d_model", 0, "model.d_model is 0"),
    ("result.steps", {"a": 1}, "steps is dict, not a list"),
    ("result.steps.1", [], "steps[1] is list, not an object"),
    ("result.extra", [], "extra is list, not an object"),
    ("result", [], "result is list, not an object"),
    ("created_at", 5, "created_at is 5, not a date"),
    ("created_at", "yesterday", "created_at is 'yesterday', not an ISO date"),
    ("save.profiler", "perf", "save.profiler is 'perf', not one of none, nsys, torch"),
    ("save.baseline_run_id", "../x", "save.baseline_run_id is '../x': it holds a folder separator"),
    ("agreement", [{"phase": "forward"}], "agreement[0] has fields"),
    ("agreement", "all", "agreement is str, not a list"),
    # second round: the parts the first did not edit
    ("result.extra.energy_summary", {"energy_j": -3.0}, "extra.energy_summary.energy_j is -3.0, below 0"),
    ("result.extra.artifacts", {"memory": "/x\u0000y"}, r"extra.artifacts.memory is '/x\x00y'"),
    ("result.model.family", "gpt2\x1b[2J", r"model.family is 'gpt2\x1b[2J': it holds control characters"),
    ("result.device_name", "AMD\u2028EPYC", r"device_name is 'AMD\u2028EPYC': it holds control characters"),
    (
        "result.blocks",
        [{"step": 0, "layer": None, "block": "mlp", "phase": "forward", "duration_ns": -1}],
        "blocks[0].duration_ns is -1",
    ),
    ("result.config.delay_rank", 4, "config.delay_rank is 4, outside 0..0"),
    # generate's per-token times and serving figures
    ("result.steps.1.tokens", [5, -5], "steps[1].tokens[1] is -5, outside 0..4611686018427387904"),
    ("result.steps.1.tokens", [1.5], "steps[1].tokens[0] is 1.5, not a whole number"),
    ("result.steps.1.tokens", "fast", "steps[1].tokens is str, not a list"),
    ("result.steps.1.tokens", [1] * 40, "steps[1].tokens holds 40 tokens, more than the run decodes"),
    ("result.config.cuda_graphs", "yes", "config.cuda_graphs is 'yes', not true or false"),
    ("result.extra.serving", {"tpot_ns": {"p99_ns": float("nan")}}, "extra.serving.tpot_ns.p99_ns is nan"),
    ("result.extra.serving", {"output_tokens_per_s": "many"}, "extra.serving.output_tokens_per_s is 'many'"),
    ("result.extra.serving", {"decode": "eager\x1b[2J"}, r"extra.serving.decode is 'eager\x1b[2J': it holds"),
    ("result.config.node_rank", 1, "config.node_rank is 1, outside 0..0"),
    ("result.env", ["x"], "env is list, not an object"),
    ("save", [], "save is list, not an object"),
    ("save.nsys_sqlite", 5, "save.nsys_sqlite is 5, not text"),
    # a lone surrogate (`\ud800` in JSON) in what is stored as text: UnicodeEncodeError as it was written
    ("result.error", "boom \ud800", r"error is 'boom \ud800': it holds a lone surrogate, not UTF-8 text"),
    ("save.nsys_rep", "/r/\udcff.nsys-rep", r"save.nsys_rep is '/r/\udcff.nsys-rep': it holds a lone"),
    # steps the step loop never records: `diff` set such sums against whole steps
    ("result.steps.2.step", 1, "steps[2].step is 1, as steps[1]: a step is recorded once"),
    (
        "result.steps.3.phases",
        {"forward": 224725737, "backward": 622661148},
        "steps[3].phases lacks optimizer: a train step times forward, backward, optimizer",
    ),
    ("result.steps", [], "steps hold no measured step, but the run's status is ok"),
    # the figures of `extra` that show, runs, compare-compile and the dashboard compute with: stored, they
    # broke those commands with a traceback (`'int' object has no attribute 'items'`, `str - int`)
    ("result.extra.first_step_ns", "abc", "extra.first_step_ns is 'abc', not a whole number"),
    ("result.extra.first_step_ns", 1.5, "extra.first_step_ns is 1.5, not a whole number"),
    ("result.extra.first_step_phases", [1], "extra.first_step_phases is list, not an object"),
    ("result.extra.first_step_phases", {"walk": 5}, "extra.first_step_phases: phase is 'walk', not one of"),
    ("result.extra.compile_ns", "x", "extra.compile_ns is 'x', not a whole number"),
    ("result.extra.compile_phases_ns", {"forward": None}, "extra.compile_phases_ns.forward is None"),
    ("result.extra.steady_phases_ns", {"forward": "slow"}, "extra.steady_phases_ns.forward is 'slow'"),
    ("result.extra.inductor_cache", {"hits": -1}, "extra.inductor_cache.hits is -1, outside 0.."),
    ("result.extra.dynamo", {"graphs": 1.5}, "extra.dynamo.graphs is 1.5, not a whole number"),
    ("result.extra.memory", "lots", "extra.memory is str, not an object"),
    ("result.extra.memory.breakdown", 5, "extra.memory.breakdown is int, not an object"),
    ("result.extra.memory.breakdown.total", "x", "extra.memory.breakdown.total is 'x', not a finite number"),
    ("result.extra.memory.peak_rss_bytes", -1, "extra.memory.peak_rss_bytes is -1, outside 0.."),
    ("result.extra.memory.peak_source", 5, "extra.memory.peak_source is 5, not text"),
    ("result.extra.memory.operators", [{"name": "aten::mm"}], "extra.memory.operators[0].calls is None"),
    ("result.steps.1", {"step": 1, "warmup": False}, "steps[1] lacks phases"),
    # the environment's values, each as harness.core.env.collect writes it (`show` lists them)
    ("result.env.host", [1], "env.host is [1], not text"),
    ("result.env.torch", 2.1, "env.torch is 2.1, not text"),
    ("result.env.platform", None, "env.platform is None, not text"),
    ("result.env.platform", "Linux\x1b[2J", r"env.platform is 'Linux\x1b[2J': it holds control characters"),
    ("result.env.cpu_threads", "2", "env.cpu_threads is '2', not a whole number"),
    ("result.env.cpu_threads", 0, "env.cpu_threads is 0, outside 1.."),
    ("result.env.cudnn", {"v": 9}, "env.cudnn is {'v': 9}, not a whole number"),
    # the words the store checks as it reads the run back
    ("save.nsys_mode", "bogus", "save.nsys_mode is 'bogus', not one of light, full"),
    (
        "result.extra.energy_summary",
        {"energy_method": "guess"},
        "extra.energy_summary.energy_method is 'guess', not one of counter, power, counter+power",
    ),
]


@pytest.mark.parametrize(("where", "value", "message"), CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CASES])
def test_an_edited_field_is_refused_and_nothing_is_stored(
    tmp_path: Path, db: Path, where: str, value: Any, message: str
) -> None:
    line = one_error(invoke(edited(tmp_path, where, value), db=db), message)
    assert line.endswith("(harness writes no such run): nothing imported"), line
    assert stored(db) == {}


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("surprise", "the file holds fields the harness does not write: 'surprise'"),
        ("save.surprise", "save holds fields the harness does not write: 'surprise'"),
        ("result.extra.surprise", "extra holds fields the harness does not write: 'surprise'"),
        ("result.env.surprise", "env holds fields the harness does not write: 'surprise'"),
    ],
)
def test_a_field_the_harness_does_not_write_is_refused(
    tmp_path: Path, db: Path, where: str, said: str
) -> None:
    """A key added to the file, its `save`, the run's `extra` (stored as its summary) or `env` was stored
    unread beside the run."""
    line = one_error(invoke(edited(tmp_path, where, 1), db=db), said)
    assert line.endswith("(harness writes no such run): nothing imported"), line
    assert stored(db) == {}


def test_the_serving_figures_generate_kept_apart_before_are_taken(tmp_path: Path, db: Path) -> None:
    """A generate run written before `serving` held them kept its TTFT and per-token time in `extra`."""
    assert invoke(edited(tmp_path, "result.extra.ttft_ns", 1.5e7), db=db).exit_code == 0
    assert list(stored(db)) == [RUN_ID]
    line = one_error(invoke(edited(tmp_path, "result.extra.per_token_ns", "x", "b.json"), db=db), "")
    assert "extra.per_token_ns is 'x', not a finite number" in line


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("latest", "run_id is 'latest': `harness show` and the others read it as the newest run"),
        ("-1", "run_id is '-1': `harness show` and the others read it as the newest run"),
        ("a,b", "run_id is 'a,b': it holds ','"),
        ("run.json", "run_id is 'run.json': it ends as a profiler's file"),
    ],
)
def test_a_run_id_no_command_could_name_is_refused(
    tmp_path: Path, db: Path, value: str, message: str
) -> None:
    """A run stored under `latest` or `-1` was taken: `show -1` then showed the newest run, never it; an id
    with a comma is two ids to `diff` and `--runs`, one ending .json a file to `diff` and `advise`."""
    line = one_error(invoke(edited(tmp_path, "result.run_id", value), db=db), message)
    assert line.endswith("(harness writes no such run): nothing imported"), line
    assert stored(db) == {}


@pytest.mark.parametrize("value", ["-0", "-\u00b2"])
def test_a_run_id_that_reads_as_an_id_is_taken_and_shown(tmp_path: Path, db: Path, value: str) -> None:
    """`-0` and `-²` count back from no run (`show` reads them as ids, as the store's newest-run rule
    does), so a run stored under either can be named, and is taken."""
    assert invoke(edited(tmp_path, "result.run_id", value), db=db).exit_code == 0
    assert list(stored(db)) == [value]
    shown = runner.invoke(app, ["show", "--db", str(db), "--format", "json", "--", value])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["run"]["run"] == value


def test_a_result_without_its_status(tmp_path: Path, db: Path) -> None:
    data = json.loads(REAL.read_text())
    del data["result"]["status"]
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    one_error(invoke(path, db=db), "result lacks status")
    assert stored(db) == {}


def test_compile_time_without_the_first_step_it_is_taken_from(tmp_path: Path, db: Path) -> None:
    """`show` read a compile time's first step as extra["first_step_ns"]: a KeyError where it was cut."""
    data = json.loads(REAL.read_text())
    del data["result"]["extra"]["first_step_ns"]
    data["result"]["extra"]["compile_ns"] = 5
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    one_error(invoke(path, db=db), "extra holds compile_ns without first_step_ns")
    assert stored(db) == {}


def test_a_refused_file_creates_no_database(tmp_path: Path) -> None:
    """`import bad.json --db new.sqlite` created new.sqlite (an empty database) before refusing the file:
    the database is opened once a file is read, so nothing is left behind."""
    new = tmp_path / "new.sqlite"
    bad = edited(tmp_path, "result.extra.first_step_ns", "abc")
    one_error(invoke(bad, db=new), "extra.first_step_ns is 'abc'")
    one_error(invoke(tmp_path / "none.json", db=new), "cannot read")
    assert not new.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["e.json"]
    result = invoke(REAL, db=new)
    assert result.exit_code == 0, result.output
    assert list(stored(new)) == [RUN_ID]


def test_a_folder_is_one_line(tmp_path: Path, db: Path) -> None:
    one_error(invoke(tmp_path, db=db), f"cannot read {tmp_path}: Is a directory")


def test_two_copies_in_one_command_store_the_first_only(tmp_path: Path, db: Path) -> None:
    other = edited(tmp_path, "result.steps.1.phases.forward", 5)
    one_error(invoke(REAL, other, db=db), "its step times differ")
    assert stored(db)[RUN_ID][1] != 5


def test_a_version_that_is_not_a_number(tmp_path: Path, db: Path) -> None:
    one_error(invoke(edited(tmp_path, "version", "1"), db=db), "version is '1', not a version")
    assert stored(db) == {}


def test_the_real_file_is_stored_once(db: Path) -> None:
    first = runner.invoke(app, ["import", str(REAL), "--db", str(db), "-f", "json"])
    assert first.exit_code == 0 and json.loads(first.stdout)[0]["stored"] == "new", first.output
    again = runner.invoke(app, ["import", str(REAL), "--db", str(db), "-f", "json"])
    assert again.exit_code == 0 and json.loads(again.stdout)[0]["stored"] == "already stored", again.output
    times = stored(db)[RUN_ID]
    assert (
        len(times) == 21
        and times[1] == json.loads(REAL.read_text())["result"]["steps"][1]["phases"]["forward"]
    )


def test_an_imported_run_has_its_phase_figures_as_a_run_saved_at_once(db: Path) -> None:
    """The file holds the run's steps, not its phase figures (a run's summary is made as it is stored): the
    run imported has them, each phase's mean over its measured steps."""
    data = json.loads(REAL.read_text())["result"]
    assert "phases" not in data["extra"]
    assert runner.invoke(app, ["import", str(REAL), "--db", str(db)]).exit_code == 0
    (row,) = ResultsStore(str(db), readonly=True).runs().to_dict("records")
    for phase in ("forward", "backward", "optimizer"):
        measured = [s["phases"][phase] for s in data["steps"] if not s["warmup"]]
        assert row[f"{phase}_mean_ns"] == pytest.approx(sum(measured) / len(measured))


def test_another_copy_never_replaces_the_stored_run(tmp_path: Path, db: Path) -> None:
    assert invoke(REAL, db=db).exit_code == 0
    good = stored(db)
    other = edited(tmp_path, "result.steps.1.phases.forward", 5)
    line = one_error(invoke(other, db=db), f"run {RUN_ID} is already in the results database (ok, char train")
    assert "its step times differ" in line and "--replace replaces the stored run" in line
    assert stored(db) == good
    status = edited(tmp_path, "result.status", "error", name="status.json")
    assert "its status differ" in one_error(invoke(status, db=db), "nothing imported")
    assert stored(db) == good


def test_replace_replaces_and_says_what(tmp_path: Path, db: Path) -> None:
    assert invoke(REAL, db=db).exit_code == 0
    other = edited(tmp_path, "result.steps.1.phases.forward", 5)
    result = runner.invoke(app, ["import", str(other), "--db", str(db), "--replace"])
    assert result.exit_code == 0, result.output
    was = "ok, char train, created 2026-11-27 10:20:24 UTC, 20 measured steps"
    assert f"note: run {RUN_ID} replaced: it was {was}" in " ".join(result.stderr.split())
    assert stored(db)[RUN_ID][1] == 5


def test_a_file_of_nan_literals_is_refused_where_they_stand(tmp_path: Path, db: Path) -> None:
    """`NaN` and `Infinity` as json.dumps writes them: refused in the field that holds them."""
    text = REAL.read_text().replace('"mfu": null', '"mfu": Infinity')
    path = tmp_path / "inf.json"
    path.write_text(text)
    one_error(invoke(path, db=db), "mfu is inf, not a finite number")


def test_not_utf8_is_refused(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe" + REAL.read_bytes())
    one_error(invoke(path, db=db), "is not a harness unsaved-run file (not UTF-8 text")


def test_a_deeply_nested_copy_is_refused(tmp_path: Path, db: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "deep.json"
    path.write_text(REAL.read_text().rstrip()[:-1] + ', "deep": ' + deep + "}")
    one_error(invoke(path, db=db), "is not a harness unsaved-run file (not JSON")


def written(result: Any, tmp_path: Path, **save: Any) -> Path:
    from datetime import UTC, datetime

    from harness.store import unsaved

    pending = unsaved.PendingRun(result=result, created_at=datetime.now(UTC), **save)
    return unsaved.write(pending, [tmp_path], "test")


def test_every_kind_of_run_the_harness_writes_is_taken(tmp_path: Path, db: Path) -> None:
    """A train run with agreement rows, a generate run, a run across two ranks with its all-reduce, a
    program's run and a failed one: each written as `run` writes it, each imported."""
    from test_store import make_result

    from harness.core.records import RunConfig, RunResult, StepRecord
    from harness.experiments.program import program_config

    agreement = [
        {"phase": "forward", "steps": 3, "nvtx_mean_ns": 1e6, "nvtx_median_ns": 1e6, "timer_mean_ns": 1.01e6,
         "timer_median_ns": 1e6, "rel_diff": -0.01},
    ]  # fmt: skip
    generate = RunResult(
        run_id="gpt2-g", config=RunConfig(model="gpt2", mode="generate", warmup=0, steps=1, new_tokens=3),
        status="ok", steps=[StepRecord(step=0, warmup=False, phases={"prefill": 10, "decode": 30},
                                       tokens=[14, 15])],
        extra={"serving": {"decode": "eager (growing KV cache)", "concurrent_sequences": 4,
                           "tpot_ns": {"count": 2, "mean_ns": 14.5, "p50_ns": 14.5},
                           "decode_gpu_busy": None}},
    )  # fmt: skip
    phases = {"forward": 1, "backward": 2, "allreduce": 3, "optimizer": 4}
    ranks = RunResult(
        run_id="tiny-r", config=RunConfig(model="tiny", nproc=2, warmup=0, steps=1), status="ok",
        steps=[StepRecord(step=0, warmup=False, rank=r, phases=phases) for r in (0, 1)],
    )  # fmt: skip
    program = RunResult(
        run_id="python3-20261127-101937-51e2", config=program_config("python3"), status="error",
        device="n/a", error="the program exited with code 3", extra={"command": ["python3", "x.py"]},
    )  # fmt: skip
    oom = RunResult(run_id="xl-oom", config=RunConfig(model="xl"), status="oom", error="CUDA out of memory")
    files = [
        written(make_result("tiny-a"), tmp_path, profiler="nsys", nsys_mode="light", agreement=agreement,
                nsys_sqlite="/runs/tiny-a.sqlite", nsys_rep="/runs/tiny-a.nsys-rep"),
        written(generate, tmp_path, profiler="torch", artifacts={"trace": "/p/t.pt.trace.json.gz"}),
        written(ranks, tmp_path),
        written(program, tmp_path, profiler="nsys", experiment="profile"),
        written(oom, tmp_path, baseline_run_id="tiny-a"),
    ]  # fmt: skip
    result = runner.invoke(app, ["import", *map(str, files), "--db", str(db), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert [r["stored"] for r in json.loads(result.stdout)] == ["new"] * 5
    assert set(stored(db)) == {"tiny-a", "gpt2-g", "tiny-r", "python3-20261127-101937-51e2", "xl-oom"}


def test_the_environment_of_a_gpu_run_is_taken(tmp_path: Path, db: Path) -> None:
    """The fields a run on a GPU adds, cuDNN's version a number; null where a machine has no git or driver."""
    env = {"git_commit": None, "cuda": "12.8", "device_name": "NVIDIA H200", "cudnn": 91002, "driver": None}
    data = json.loads(REAL.read_text())
    data["result"]["env"].update(env)
    (path := tmp_path / "gpu.json").write_text(json.dumps(data))
    assert invoke(path, db=db).exit_code == 0
    shown = runner.invoke(app, ["show", RUN_ID, "--db", str(db), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert {k: v for k, v in json.loads(shown.stdout)["run"].items() if k in {f"env.{k}" for k in env}} == {
        f"env.{k}": v for k, v in env.items()
    }


def test_the_energy_methods_checked_are_those_the_harness_writes() -> None:
    """The energy methods of a device with a counter, of one with power readings, and of the two summed."""
    import numpy as np
    import pandas as pd

    from analysis.runs.energy import energy_table, run_summary
    from workloads.names import ENERGY_METHODS

    t_ns = [0, 500_000_000, 1_000_000_000]
    samples = pd.DataFrame(
        {"device": ["gpu0"] * 3 + ["package"] * 3, "tick": [0, 1, 2] * 2, "t_ns": t_ns * 2,
         "power_w": [100.0] * 3 + [np.nan] * 3, "energy_j": [np.nan] * 3 + [0.0, 5.0, 10.0]}
    )  # fmt: skip
    steps = pd.DataFrame({"step": [0], "phase": ["forward"], "start_ns": [0], "end_ns": [1_000_000_000]})
    table = energy_table(samples, steps)
    methods = [run_summary(table, device)["energy_method"] for device in ("package", "gpu0", "total")]
    assert methods == list(ENERGY_METHODS)


def test_a_refused_file_says_which_files_went_in_before_it_and_which_were_not_tried(
    tmp_path: Path, db: Path
) -> None:
    """`import good.json bad.json rest.json`: good.json is stored; the refusal of bad.json says so (its
    "nothing imported" is of bad.json alone) and names rest.json, not tried."""
    bad = edited(tmp_path, "version", "1", name="bad.json")
    rest = edited(tmp_path, "result.steps.1.phases.forward", 5, name="rest.json")
    line = one_error(invoke(REAL, bad, rest, db=db), "version is '1', not a version")
    said = f"; imported before it: {REAL} (new: run {RUN_ID}); not tried after it: {rest}"
    assert line.endswith(said), line
    assert list(stored(db)) == [RUN_ID]
