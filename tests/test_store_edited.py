"""A results database edited by hand (sqlite3, a script): a row of a shape the harness never writes is said
in one line naming the database, the run and the field, exit 1, by every command that reads it (`runs`,
`show`, `diff`, `dashboard`, `health`), never a traceback. A command over several runs (`runs`, `diff`'s
drift, `dashboard`, `compare-compile`, the runs paired with the one `health` or `advise` judges) gives what
it gives of the others, then that line; one naming the damaged run refuses in it. Each edit is made to one
of the runs imported from tests/data/harness-unsaved-char.json."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()
REAL = Path(__file__).parent / "data" / "harness-unsaved-char.json"
ONE = "update runs set {} where id = 'a-1'"
EDITS = {
    # (the SQL, the field the line names)
    "summary a list": (ONE.format("summary = '[1, 2]'"), "summary is list, not an object"),
    "summary not JSON": (ONE.format("summary = '[1, 2'"), "summary is '[1, 2', not JSON"),
    "config not JSON": (ONE.format("config = 'fast'"), "config is 'fast', not JSON"),
    "env cut short": (ONE.format("env = substr(env, 1, 60)"), 'env is \'{"harness": '),
    "phases text": (ONE.format("summary = json_set(summary, '$.phases', 'abc')"), "summary.phases is str"),
    "a phase's mean text": (
        ONE.format("summary = json_set(summary, '$.phases[0].mean_ns', 'x')"),
        "summary.phases[0].mean_ns is 'x', not a finite number",
    ),
    "memory text": (ONE.format("summary = json_set(summary, '$.memory', 'x')"), "summary.memory is str"),
    "machine text": (ONE.format("summary = json_set(summary, '$.machine', 'x')"), "summary.machine is str"),
    "power notes 5": (ONE.format("summary = json_set(summary, '$.power_notes', 5)"), "summary.power_notes"),
    "serving text": (ONE.format("summary = json_set(summary, '$.serving', 'x')"), "summary.serving is str"),
    "command 5": (ONE.format("summary = json_set(summary, '$.command', 5)"), "summary.command is 5, not"),
    "fixes 5": (ONE.format("config = json_set(config, '$.fixes', 5)"), "config.fixes is 5, not a list"),
    "model_info a list": (ONE.format("model_info = '[1]'"), "model_info is list, not an object"),
    "env a list": (ONE.format("env = '[1]'"), "env is list, not an object"),
    "artifacts text": (ONE.format("artifacts = '\"x\"'"), "artifacts is str, not an object"),
    "advice text": (ONE.format("advice = '\"x\"'"), "advice is str, not an object"),
    "world size text": (ONE.format("world_size = 'x'"), "world_size is 'x', not a whole number"),
    "created yesterday": (ONE.format("created_at = 'yesterday'"), "created_at is 'yesterday', not a time"),
    "created 5": (ONE.format("created_at = 5"), "created_at is 5, not a time"),
    "mode fly": (ONE.format("mode = 'fly'"), "mode is 'fly', not one of train, forward, generate, program"),
    "peak memory text": (ONE.format("peak_memory_bytes = 'x'"), "peak_memory_bytes is 'x', not a whole"),
    "a step of text": (
        "update step_timings set duration_ns = 'x' where run_id = 'a-1'",
        "step_timings: step 0: forward is 'x', not a whole number",
    ),
    "a step of 1.5 ns": (
        "update step_timings set duration_ns = 1.5 where run_id = 'a-1'",
        "step_timings: step 0: forward is 1.5, not a whole number",
    ),
    "a step of 9e18 ns": (
        "update step_timings set duration_ns = 9e18 where run_id = 'a-1'",
        "step_timings: step 0: forward is 9000000000000000000, outside -4611686018427387904..",
    ),
    "a rank of text": (
        "update step_timings set rank = 'x' where run_id = 'a-1'",
        "step_timings: step 0: rank is 'x', not a whole number",
    ),
    "a step's warmup x": (
        "update step_timings set warmup = 'x' where run_id = 'a-1'",
        "step_timings: step 0: warmup is 'x', not true or false",
    ),
}
# a run's column (SET clause) that was read as stored: words the harness never writes, bytes for text, and
# true or false of another value (SQLAlchemy's Boolean read each as true); what the line names
COLUMN_EDITS = {
    "nsys_mode = 'bogus'": "nsys_mode is 'bogus', not one of light, full",
    "nsys_mode = 5": "nsys_mode is '5', not one of light, full",
    "energy_method = 'guess'": "energy_method is 'guess', not one of counter, power, counter+power",
    "nsys_rep = X'00'": "nsys_rep is b'\\x00', not text",
    "nsys_sqlite = X'41'": "nsys_sqlite is b'A', not text",
    "error = X'41'": "error is b'A', not text",
    "experiment = 'sweep' || char(27) || '[2J'": "experiment is 'sweep\\x1b[2J': it holds control characters",
    "baseline_run_id = '../b-1'": "baseline_run_id is '../b-1': it holds a folder separator",
    "compile = 'x'": "compile is 'x', not true or false",
    "compile = 2": "compile is 2, not true or false",
    "config = json_set(config, '$.compile', 'x')": "config.compile is 'x', not true or false",
    "config = json_set(config, '$.cuda_graphs', 1)": "config.cuda_graphs is 1, not true or false",
}
# a field of a run's environment as `harness import` refuses it in a file (`show` listed it as stored)
ENV_EDITS = {
    "env = json_set(env, '$.host', json('[1]'))": "env.host is [1], not text",
    "env = json_set(env, '$.host', json('null'))": "env.host is None, not text",
    "env = json_set(env, '$.torch', 2.1)": "env.torch is 2.1, not text",
    "env = json_set(env, '$.platform', 'L' || char(27) || '[2J')": "env.platform is 'L\\x1b[2J': it holds",
    "env = json_set(env, '$.cpu_threads', 'x')": "env.cpu_threads is 'x', not a whole number",
    "env = json_set(env, '$.cpu_threads', 0)": "env.cpu_threads is 0, outside 1..",
    "env = json_set(env, '$.gpu', 'x')": "env holds fields the harness does not write: 'gpu'",
}
EDITS.update({edit: (ONE.format(edit), said) for edit, said in {**COLUMN_EDITS, **ENV_EDITS}.items()})
COMMANDS = [["runs"], ["show", "a-1"], ["diff", "a-1", "b-1"], ["dashboard", "-o", "OUT"], ["health", "a-1"]]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of two runs, a-1 and b-1, as `harness import` stores them."""
    return imported(tmp_path_factory.mktemp("edited"), "a-1", "b-1")


def imported(folder: Path, *run_ids: str) -> Path:
    """A database in `folder` of the runs `run_ids`, each REAL's run as `harness import` stores it."""
    files = []
    for run_id in run_ids:
        data = json.loads(REAL.read_text())
        data["result"]["run_id"] = run_id
        files.append(folder / f"{run_id}.json")
        files[-1].write_text(json.dumps(data))
    db = folder / "base.sqlite"
    result = runner.invoke(app, ["import", *map(str, files), "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_row_edited_by_hand_is_one_line_in_every_reader(stored: Path, tmp_path: Path, edit: str) -> None:
    """Each edit broke one or more of these commands with a traceback (AttributeError, TypeError, KeyError,
    ValueError: `Invalid isoformat string`, OverflowError)."""
    db = tmp_path / "edited.sqlite"
    shutil.copy(stored, db)
    sql, field = EDITS[edit]
    with sqlite3.connect(db) as con:
        con.execute(sql)
    con.close()
    said = f"error: results database {db}: run 'a-1' is damaged ({field}"  # the rest of the field's words
    for command in COMMANDS:
        args = [str(tmp_path / "page.html") if a == "OUT" else a for a in command]
        result = runner.invoke(app, [*args, "--db", str(db)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (command, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(said), (command, result.stderr)
        assert lines[0].endswith("it was changed outside the harness; restore a copy of the database")
        if command == ["runs"]:  # the other run is listed before it
            assert "b-1" in result.stdout and "a-1" not in result.stdout, result.stdout


def edited(stored: Path, tmp_path: Path, *sql: str) -> Path:
    db = tmp_path / "edited.sqlite"
    shutil.copy(stored, db)
    with sqlite3.connect(db) as con:
        for statement in sql:
            con.execute(statement)
    con.close()
    return db


def test_the_words_and_switches_the_harness_writes_are_read(stored: Path, tmp_path: Path) -> None:
    """A run under nsys's full mode, compiled, its joules from a counter and power readings summed."""
    db = edited(
        stored,
        tmp_path,
        ONE.format("profiler = 'nsys', nsys_mode = 'full', energy_method = 'counter+power', compile = 1"),
        ONE.format("experiment = 'sweep-1', nsys_rep = '/r/a-1.nsys-rep', error = NULL"),
        ONE.format("config = json_set(config, '$.compile', json('true'))"),
        ONE.format(  # a GPU's machine, without git or a driver NVML could read
            "env = json_set(env, '$.git_commit', json('null'), '$.device_name', 'NVIDIA H200', "
            "'$.cuda', '12.8', '$.cudnn', 91002, '$.driver', json('null'))"
        ),
    )
    result = runner.invoke(app, ["runs", "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    runs = {r["run_id"]: r for r in json.loads(result.stdout)}
    assert runs["a-1"]["compile"] is True and runs["b-1"]["compile"] is False
    assert (runs["a-1"]["nsys_mode"], runs["a-1"]["energy_method"]) == ("full", "counter+power")
    shown = runner.invoke(app, ["show", "a-1", "--db", str(db), "--format", "json"])
    assert shown.exit_code == 0 and shown.stderr == "", shown.output
    assert json.loads(shown.stdout)["run"]["profiler"] == "nsys (full)"
    run = json.loads(shown.stdout)["run"]
    assert (run["env.cudnn"], run["env.driver"], run["env.device_name"]) == (91002, None, "NVIDIA H200")


def test_runs_lists_the_runs_it_can_read_and_names_each_it_cannot(stored: Path, tmp_path: Path) -> None:
    """Every run damaged: no run is listed, and none is said to be missing (`no runs yet`)."""
    db = edited(stored, tmp_path, "update runs set summary = '[1, 2'")
    for fmt in ("table", "json"):
        result = runner.invoke(app, ["runs", "--db", str(db), "--format", fmt])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert [line.split(" is damaged ")[0] for line in lines] == [
            f"error: results database {db}: run 'a-1'",
            f"error: results database {db}: run 'b-1'",
        ], result.stderr
        assert "no runs" not in result.output
    assert result.stdout.strip() == "[]"


def test_show_of_a_run_paired_with_a_damaged_one_shows_it_and_says_so(stored: Path, tmp_path: Path) -> None:
    """b-1's baseline a-1 damaged: `show b-1` refused with a-1's line."""
    db = edited(
        stored, tmp_path, "update runs set baseline_run_id = 'a-1' where id = 'b-1'", ONE.format("env = '['")
    )
    result = runner.invoke(app, ["show", "b-1", "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run"]["run"] == "b-1"
    assert result.stderr.startswith(
        f"warning: results database {db}: run 'a-1' is damaged (env is '[', not JSON)"
    )
    assert result.stderr.endswith("restore a copy of the database; run b-1 is shown without it\n")
    assert result.stderr.count("\n") == 1, result.stderr
    shown = runner.invoke(app, ["show", "a-1", "--db", str(db)])
    assert shown.exit_code == 1 and shown.stderr.count("\n") == 1, shown.output
    assert "run 'a-1' is damaged (env is '[', not JSON)" in shown.stderr


def test_the_unedited_database_is_read(stored: Path, tmp_path: Path) -> None:
    for command in COMMANDS:
        args = [str(tmp_path / "page.html") if a == "OUT" else a for a in command]
        result = runner.invoke(app, [*args, "--db", str(stored)])
        assert result.exit_code == 0, (command, result.output)


@pytest.mark.parametrize(
    ("sql", "command", "said"),
    [
        (
            "insert into block_timings (run_id, step, layer, block, phase, duration_ns, calls, source) "
            "values ('a-1', 'x', 0, 'mlp', 'forward', 5, 1, 'timers')",
            ["blocks", "a-1"],
            "run 'a-1' is damaged (block_timings: step is 'x', not a whole number)",
        ),
        (
            "insert into block_timings (run_id, step, layer, block, phase, duration_ns, calls, source) "
            "values ('a-1', 1, 0, 'mlp', 'bogus', 5, 1, 'timers')",
            ["roofline", "a-1"],
            "run 'a-1' is damaged (block_timings: phase 'bogus', not one of forward, backward, allreduce, "
            "optimizer, prefill, decode)",
        ),
        (
            "insert into block_timings (run_id, step, layer, block, phase, duration_ns, calls, source) "
            "with recursive s(n) as (select 1 union all select n + 1 from s where n < 21) "
            "select 'a-1', n, 0, 'mlp', 'forward', 5, 1, 'timers' from s",
            ["blocks", "a-1"],
            "run 'a-1' is damaged (block_timings: 21 steps, more than the run's 20 measured steps)",
        ),
        (
            "insert into block_timings (run_id, step, layer, block, phase, duration_ns, calls, source) "
            "values ('a-1', 1, 0, 'mlp', 'forward', -900000000, 1, 'timers')",
            ["roofline", "a-1"],
            "run 'a-1' is damaged (block_timings: step 1: mlp is -900000000, outside 0..4611686018427387904)",
        ),
        (
            "insert into baselines (name, run_id, created_at) values ('main', 'a-1', 'never')",
            ["baseline", "list"],
            "baseline 'main' is damaged (created_at is 'never', not a time)",
        ),
    ],
    ids=["block row", "block phase", "block steps", "block time", "baseline"],
)
def test_a_block_or_baseline_row_edited_by_hand_is_one_line(
    stored: Path, tmp_path: Path, sql: str, command: list[str], said: str
) -> None:
    """pyarrow's `ArrowInvalid: Failed to parse string`, `ValueError: Invalid isoformat string`."""
    db = tmp_path / "edited.sqlite"
    shutil.copy(stored, db)
    with sqlite3.connect(db) as con:
        con.execute(sql)
    con.close()
    result = runner.invoke(app, [*command, "--db", str(db)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr.startswith(f"error: results database {db}: {said}: the harness writes no such row")
    assert result.stderr.count("\n") == 1, result.stderr


AGREEMENT = "update agreement set {} where run_id = 'a-1' and phase = 'forward'"
CELL = "update attention_results set {} where impl = 'math'"
DASHBOARD = [["dashboard", "-o", "OUT"]]
OTHER_ROWS = {
    # (the SQL, the commands that read the row, the row and field the line names)
    "a difference of text": (
        AGREEMENT.format("rel_diff = 'x'"),
        [["show", "a-1"], ["dashboard", "-o", "OUT"], ["health", "a-1"]],
        "run 'a-1' is damaged (agreement: forward: rel_diff is 'x', not a finite number)",
    ),
    "an NVTX time below 0": (
        AGREEMENT.format("nvtx_mean_ns = -5"),
        [["show", "a-1"], ["dashboard", "-o", "OUT"]],
        "run 'a-1' is damaged (agreement: forward: nvtx_mean_ns is -5.0, below 0)",
    ),
    "steps of text": (
        AGREEMENT.format("steps = 'x'"),
        [["show", "a-1"], ["dashboard", "-o", "OUT"]],
        "run 'a-1' is damaged (agreement: forward: steps is 'x', not a whole number)",
    ),
    "a cell's time of text": (
        CELL.format("forward_mean_ns = 'x'"),
        [["dashboard", "-o", "OUT"]],
        "attention sweep 'attn-1' is damaged (math head_dim 16 seq_len 256: forward_mean_ns is 'x', not a "
        "finite number)",
    ),
    "a cell ok without its time": (
        CELL.format("backward_mean_ns = NULL"),
        [["dashboard", "-o", "OUT"]],
        "attention sweep 'attn-1' is damaged (math head_dim 16 seq_len 256: backward_mean_ns is missing "
        "(null), but the cell ended ok)",
    ),
    "a cell's time no time": (
        CELL.format("created_at = 'never'"),
        [["dashboard", "-o", "OUT"]],
        "attention sweep 'attn-1' is damaged (created_at is 'never', not a time)",
    ),
    "a cell's causal x": (
        CELL.format("causal = 'x'"),
        [["dashboard", "-o", "OUT"]],
        "attention sweep 'attn-1' is damaged (causal is 'x', not true or false)",
    ),
    "a cell's size of text": (
        CELL.format("seq_len = 'long'"),
        [["dashboard", "-o", "OUT"]],
        "attention sweep 'attn-1' is damaged (seq_len is 'long', not a whole number)",
    ),
    # the sweep's environment, each field as a run's (`harness import` takes it so)
    **{
        f"a cell's {sql}": (CELL.format(sql), DASHBOARD, f"attention sweep 'attn-1' is damaged ({said})")
        for sql, said in (
            ("env = json_set(env, '$.torch', 5)", "env.torch is 5, not text"),
            ("env = json_set(env, '$.cpu_threads', 'x')", "env.cpu_threads is 'x', not a whole number"),
            ("env = '[1, 2'", "env is '[1, 2', not JSON"),
        )
    },
}


@pytest.fixture(scope="module")
def with_rows(stored: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two runs, a-1 with its agreement with NVTX and one attention sweep, as the store writes them."""
    import pandas as pd

    from harness.core import env
    from harness.core.records import AttentionCell, AttentionConfig, AttentionSweep
    from harness.store.results import ResultsStore
    from harness.store.unsaved import AGREEMENT_COLUMNS

    db = tmp_path_factory.mktemp("rows") / "rows.sqlite"
    shutil.copy(stored, db)
    store = ResultsStore(str(db))
    rows = [("forward", 3, 1.0e8, 1.0e8, 1.01e8, 1.0e8, -0.0099), ("backward", 3, 2e8, 2e8, 2e8, 2e8, 0.0)]
    store.save_agreement("a-1", pd.DataFrame(rows, columns=list(AGREEMENT_COLUMNS)))
    config = AttentionConfig(head_dims=(16,), seq_lens=(256,))
    sweep = AttentionSweep("attn-1", config, "cpu", "x86", "rss", env.collect())  # a CPU's, as stored
    for impl in ("math", "sdpa"):
        store.save_attention(sweep, AttentionCell(impl, 16, 256, "ok", 1e5, 1e3, 2e5, 2e3, 2**20))
    store.engine.dispose()
    return db


@pytest.mark.parametrize("edit", list(OTHER_ROWS))
def test_an_agreement_or_attention_row_edited_by_hand_is_one_line(
    with_rows: Path, tmp_path: Path, edit: str
) -> None:
    """An agreement difference of text was shown as a column of x's; an attention time of text drawn as no
    time, one of no time a traceback (`Invalid isoformat string`)."""
    sql, commands, said = OTHER_ROWS[edit]
    db = edited(with_rows, tmp_path, sql)
    for command in commands:
        args = [str(tmp_path / "page.html") if a == "OUT" else a for a in command]
        result = runner.invoke(app, [*args, "--db", str(db)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (command, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"error: results database {db}: {said}"), lines
        assert lines[0].endswith("it was changed outside the harness; restore a copy of the database")


def test_the_agreement_and_attention_rows_as_stored_are_read(with_rows: Path, tmp_path: Path) -> None:
    shown = runner.invoke(app, ["show", "a-1", "--db", str(with_rows), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    agreement = json.loads(shown.stdout)["NVTX vs in-process timers"]
    assert [row["Difference (%)"] for row in agreement] == [pytest.approx(-0.99), 0.0]
    page = runner.invoke(app, ["dashboard", "-o", str(tmp_path / "page.html"), "--db", str(with_rows)])
    assert page.exit_code == 0, page.output


# a-1 eager, b-1 compiled, c-1 of a-1's configuration made earlier, against a-1 as its baseline, all three in
# one experiment: c-1 is among the runs `dashboard` and `compare-compile` read, the runs `diff a-1 b-1`
# measures its drift from, and the runs paired with a-1 that `health a-1` and `advise a-1` read
SEVERAL = (
    "update runs set experiment = 'sweep-1'",
    "update runs set compile = 1, config = json_set(config, '$.compile', json('true')) where id = 'b-1'",
    "update runs set baseline_run_id = 'a-1', created_at = '2026-11-27 10:00:00.000000' where id = 'c-1'",
)
THIRD = "update {} where {} = 'c-1'"
DAMAGE = {
    # (the SQL, the field the line names, whether `runs` and `diff` read it: `runs` the steps its means are
    # made of, `diff` the rows and steps of the runs it measures its drift from; the runs the dashboard's
    # page holds)
    "its row": (
        THIRD.format("runs set summary = '[1, 2'", "id"),
        "summary is '[1, 2', not JSON",
        (True, True),
        "2 runs from",
    ),
    "a step": (
        THIRD.format("step_timings set duration_ns = 'x'", "run_id"),
        "step_timings: step 0: forward is 'x', not a whole number",
        (True, True),
        "2 runs from",
    ),
}


@pytest.fixture(scope="module")
def several(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs as `harness import` stores them, set apart as SEVERAL says."""
    folder = tmp_path_factory.mktemp("several")
    return edited(imported(folder, "a-1", "b-1", "c-1"), folder, *SEVERAL)


def _outputs(page: Path, held: str) -> dict[str, tuple[list[str], Callable[[str], object], object]]:
    """Each command over several runs, what it gives of a-1 and b-1 (run ids, a page, a health's checks),
    and what that is with c-1 left out (`held`: what the page says it holds)."""
    ids = ["a-1", "b-1"]
    return {
        "runs": (["runs", "--format", "json"], lambda out: [r["run_id"] for r in json.loads(out)], ids),
        "diff": (
            ["diff", "a-1", "b-1", "--format", "json"],
            lambda out: [json.loads(out)[s] for s in "ab"],
            ids,
        ),
        "dashboard": (
            ["dashboard", "-o", str(page), "--format", "json"],
            lambda out: re.findall(r"\d+ runs? from", page.read_text()),
            [held],
        ),
        "compare-compile": (
            ["compare-compile", "--format", "json"],
            lambda out: sorted({r[k] for r in json.loads(out) for k in ("eager run", "compiled run")}),
            ids,
        ),
        "health": (["health", "a-1", "--format", "json"], lambda out: len(json.loads(out)["health"]), 5),
        "advise": (["advise", "a-1"], lambda out: out, ""),  # no capture to judge: said on stderr, exit 1
    }


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_command_over_several_runs_reads_past_a_damaged_one_and_names_it(
    several: Path, tmp_path: Path, damage: str
) -> None:
    """c-1 damaged: `dashboard`, `compare-compile`, `health a-1` and `advise a-1` (and `diff a-1 b-1`, of a
    step) refused in c-1's line alone. Each gives what it gives of the runs it can read, says what it says
    without c-1's damage, then c-1's line, exit 1 (as `runs` lists the others)."""
    sql, field, (runs_reads, diff_reads), held = DAMAGE[damage]
    db = edited(several, tmp_path, sql)
    said = f"error: results database {db}: run 'c-1' is damaged ({field}"
    page = tmp_path / "page.html"
    for name, (args, of, expected) in _outputs(page, held).items():
        sound = runner.invoke(app, [*args, "--db", str(several)])
        page.unlink(missing_ok=True)
        result = runner.invoke(app, [*args, "--db", str(db)])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if not {"runs": runs_reads, "diff": diff_reads}.get(name, True):  # it reads nothing damaged
            assert result.exit_code == sound.exit_code == 0 and "c-1" not in result.stderr, lines
            continue
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (name, result.output)
        assert lines[-1].startswith(said) and lines[-1].endswith("restore a copy of the database"), lines
        assert [line for line in lines if "damaged" in line] == lines[-1:], lines
        if name != "compare-compile":  # which counts the eager runs it read
            assert lines[:-1] == [s for s in sound.stderr.splitlines() if s.strip()], (name, lines)
        assert of(result.stdout) == expected, (name, result.stdout)
    assert lines[-2].startswith("error: no findings for run a-1"), lines  # advise: a-1 has no capture


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize(
    "command",
    [
        ["diff", "a-1", "c-1"],
        ["diff", "c-1", "b-1"],
        ["dashboard", "--runs", "a-1,c-1", "-o", "OUT"],
        ["dashboard", "--compare", "c-1,b-1", "-o", "OUT"],
        ["compare-compile", "--baseline", "c-1"],
        ["health", "c-1"],
        ["advise", "c-1"],
        ["show", "c-1"],
    ],
    ids=" ".join,
)
def test_a_command_naming_the_damaged_run_refuses_in_its_line(
    several: Path, tmp_path: Path, damage: str, command: list[str]
) -> None:
    sql, field, *_ = DAMAGE[damage]
    db = edited(several, tmp_path, sql)
    args = [str(tmp_path / "page.html") if a == "OUT" else a for a in command]
    result = runner.invoke(app, [*args, "--db", str(db)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr.startswith(f"error: results database {db}: run 'c-1' is damaged ({field})")
    assert result.stderr.count("\n") == 1 and result.stdout == "", result.output
    assert not (tmp_path / "page.html").exists()


def test_compare_compile_passes_over_an_eager_run_whose_steps_are_damaged(
    several: Path, tmp_path: Path
) -> None:
    """a-1, the newest eager run, its steps damaged: c-1, the eager run before it, is b-1's baseline, not
    a-1 with no steps (then no configuration had both an eager and a compiled run); the note on the
    baseline counts the sound eager runs and names a-1, passed over; a-1's line after, exit 1."""
    db = edited(several, tmp_path, "update step_timings set duration_ns = 'x' where run_id = 'a-1'")
    result = runner.invoke(app, ["compare-compile", "--format", "json", "--db", str(db)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert {(r["eager run"], r["compiled run"]) for r in json.loads(result.stdout)} == {("c-1", "b-1")}
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], lines
    assert [line for line in lines if line.startswith("note: baseline:")] == [
        "note: baseline: eager run c-1 (the only sound eager run of this configuration, a-1 passed over as "
        "damaged); compiled run b-1"
    ], lines
    said = "run 'a-1' is damaged (step_timings: step 0: forward is 'x', not a whole number)"
    assert lines[-1].startswith(f"error: results database {db}: {said}"), lines
