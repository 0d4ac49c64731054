"""The commands that read and manage stored runs, as a new user drives them: show, diff, dashboard."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

from test_store import make_result
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore


def _invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args))


def _csv_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """`show -f csv`'s tables by title (each after a `# title` line, blank lines between)."""
    tables: dict[str, list[dict[str, str]]] = {}
    for block in text.strip().split("\n\n"):
        title, _, body = block.partition("\n")
        tables[title.removeprefix("# ")] = list(csv.DictReader(io.StringIO(body)))
    return tables


def test_show_csv_and_json_keep_the_rank_column_of_a_one_rank_run(tmp_db: str) -> None:
    """A script reading the steps of several runs gets one set of columns: a run on one rank has rank 0,
    as a run across ranks has its ranks; the terminal leaves out the column that says nothing there. Its
    phase times are whole nanoseconds, as stored (they were printed as floats: 1000002.0)."""
    save_run(ResultsStore(tmp_db), make_result("tiny-one"))
    shown = _invoke("show", "tiny-one", "--db", tmp_db, "-f", "csv")
    assert shown.exit_code == 0, shown.output
    steps = _csv_tables(shown.stdout)["steps"]
    assert [(r["rank"], r["step"], r["warmup"]) for r in steps] == [
        ("0", "0", "True"), ("0", "1", "True"), ("0", "2", "False"), ("0", "3", "False"), ("0", "4", "False"),
    ]  # fmt: skip
    assert steps[2]["forward (ns)"] == "1000002"  # whole nanoseconds, as every table's data
    as_json = _invoke("show", "tiny-one", "--db", tmp_db, "-f", "json")
    import json

    assert [r["rank"] for r in json.loads(as_json.stdout)["steps"]] == [0, 0, 0, 0, 0]
    assert json.loads(as_json.stdout)["steps"][2]["forward (ns)"] == 1_000_002  # an int, not 1000002.0
    assert "1000002.0" not in as_json.stdout
    table = _invoke("show", "tiny-one", "--db", tmp_db)
    lines = table.stdout.splitlines()
    header = lines[lines.index("steps") : lines.index("steps") + 5]  # its title, border, header lines
    assert any("warmup" in line for line in header) and not any("rank" in line for line in header)


def test_dashboard_whose_filter_matches_nothing_says_so_not_that_the_database_is_empty(
    tmp_db: str, tmp_path
) -> None:
    save_run(ResultsStore(tmp_db), make_result("tiny-one"))
    page = tmp_path / "page.html"
    shown = _invoke("dashboard", "--db", tmp_db, "--model", "nosuch", "-o", str(page), "-f", "json")
    assert shown.exit_code == 0, shown.output
    import json

    phases = next(p for p in json.loads(shown.stdout) if p["Panel"] == "phases")
    assert phases["Title or what is missing"] == (
        "no run matches --model nosuch (1 run in the results database; `harness runs` lists them)"
    )
    assert "no runs in the results database" not in page.read_text()


def test_diff_of_a_run_with_itself_is_refused_not_judged(tmp_db: str) -> None:
    """`diff -1 -1` (or baseline:main when main is the newest run) compared a run with itself: every Δ 0,
    a verdict drawn from one set of steps twice, the gate able to pass."""
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    save_run(store, make_result("tiny-b"))
    store.tag_baseline("main", "tiny-b")
    for a, b in (("-1", "-1"), ("baseline:main", "latest"), ("tiny-a,tiny-b", "tiny-b")):
        shown = _invoke("diff", a, b, "--db", tmp_db, "--gate", "5")
        assert shown.exit_code == 2, (a, b, shown.output)
        assert shown.stderr == (
            "error: run tiny-b is on both sides: a run compared with itself differs by nothing; give "
            "other runs\n"
        )
    both = _invoke("diff", "tiny-a,tiny-b", "tiny-b,tiny-a", "--db", tmp_db)
    assert both.exit_code == 2 and both.stderr.startswith("error: runs tiny-b, tiny-a are on both sides: ")
    assert _invoke("diff", "tiny-a", "tiny-b", "--db", tmp_db).exit_code == 0


def test_dashboard_compare_of_a_run_with_itself_is_refused(tmp_db: str, tmp_path) -> None:
    save_run(ResultsStore(tmp_db), make_result("tiny-a"))
    page = tmp_path / "page.html"
    shown = _invoke("dashboard", "--db", tmp_db, "--compare", "-1,tiny-a", "-o", str(page))
    assert shown.exit_code == 2, shown.output
    assert shown.stderr == "error: --compare names run tiny-a twice: give two different runs\n"
    assert not page.exists()


def test_show_of_a_run_that_ended_early_counts_the_steps_it_measured(tmp_db: str) -> None:
    """An interrupted run asked for 3 measured steps and measured 1: `measured steps` says 1 (json too),
    and the steps asked for beside it."""
    result = make_result("tiny-cut")
    result.steps = result.steps[:3]  # two warm-up steps, one measured
    result.status, result.error = "interrupted", "interrupted by SIGINT after 1 of 3 measured steps"
    save_run(ResultsStore(tmp_db), result)
    import json

    shown = _invoke("show", "tiny-cut", "--db", tmp_db, "-f", "json")
    run = json.loads(shown.stdout)["run"]
    assert (run["measured steps"], run["steps asked"], run["warmup steps"]) == (1, 3, 2)
    whole = _invoke("show", "tiny-cut", "--db", tmp_db, "-f", "csv").stdout
    assert "measured steps,1\n" in whole and "steps asked,3\n" in whole
    save_run(ResultsStore(tmp_db), make_result("tiny-whole"))
    run = json.loads(_invoke("show", "tiny-whole", "--db", tmp_db, "-f", "json").stdout)["run"]
    assert run["measured steps"] == 3 and "steps asked" not in run


def test_an_ambiguous_prefix_names_the_runs_it_starts(tmp_db: str) -> None:
    """`show tiny` with two tiny runs said "2 runs with id 'tiny'", as if two runs had that id."""
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    save_run(store, make_result("tiny-b"))
    shown = _invoke("show", "tiny", "--db", tmp_db)
    assert shown.exit_code == 2
    assert shown.stderr == (
        "error: 'tiny' is the start of 2 runs' ids (tiny-a, tiny-b): give more of one; `harness runs` lists "
        "the runs\n"
    )
    assert _invoke("show", "tiny-b", "--db", tmp_db).exit_code == 0


def _generate_result(run_id: str) -> object:
    from harness.core.records import StepRecord

    result = make_result(run_id)
    result.config.mode = "generate"
    result.steps = [
        StepRecord(step=i, warmup=i < 2, phases={"prefill": 500_000 + i, "decode": 9_000_000 + i})
        for i in range(5)
    ]
    return result


def test_diff_of_runs_with_no_phase_in_common_gives_no_verdict_row_of_zero_steps(tmp_db: str) -> None:
    """A train run against a generate run: the verdict table held one `overall (step)` row, 0 steps a side,
    `inconclusive` for want of a drift measured; the runs share no phase, so there is no verdict at all."""
    import json

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-train"))
    save_run(store, _generate_result("tiny-gen"))
    shown = _invoke("diff", "tiny-train", "tiny-gen", "--db", tmp_db, "-f", "json")
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert not any(t.startswith("Phases") for t in doc), doc
    common = "A (tiny-train) and B (tiny-gen) time no phase in common: their steps are not compared"
    assert common in doc["notes"]
    assert not any("no drift between runs measured" in n for n in doc["notes"])
    table = _invoke("diff", "tiny-train", "tiny-gen", "--db", tmp_db)
    assert "overall (step)" not in table.stdout and "inconclusive" not in table.stdout
    page = tmp_db.removeprefix("sqlite:///") + ".html"
    assert _invoke("diff", "tiny-train", "tiny-gen", "--db", tmp_db, "--html", page).exit_code == 0
    assert "the two runs time no phase in common: no verdict" in Path(page).read_text()
    gated = _invoke("diff", "tiny-train", "tiny-gen", "--db", tmp_db, "--gate", "5")
    assert gated.exit_code == 1
    assert "time no phase in common: nothing to gate" in gated.stderr
    # csv: the verdicts' columns without a row (it was a lone `table` header)
    csv = _invoke("diff", "tiny-train", "tiny-gen", "--db", tmp_db, "-f", "csv")
    assert csv.stdout == (
        "table,Phase,Verdict,Mean A (ns),Mean B (ns),Δ (%),CI Low (%),CI High (%),Steps A,Steps B,Detail\n"
    )


def test_a_database_with_text_that_is_not_utf8_is_called_corrupt(tmp_db: str) -> None:
    """Flipped bytes in a text cell: SQLite's decoding error was passed on as it came, without saying the
    database is damaged or what to do."""
    import sqlite3

    save_run(ResultsStore(tmp_db), make_result("tiny-a"))
    path = tmp_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET model = CAST(X'54FF5854' AS TEXT)")
    shown = _invoke("runs", "--db", tmp_db)
    assert shown.exit_code == 1
    assert shown.stderr.startswith(f"error: results database {path} is corrupt (Could not decode to UTF-8")
    assert shown.stderr.endswith("; restore a copy or pass --db a new file\n")


def test_dashboard_comparison_draws_no_kernels_from_a_degraded_run() -> None:
    """A run whose capture failed its health checks keeps its step times, not its export's kernel times:
    the comparison panel drew its per-kernel differences as if they could be trusted."""
    import pandas as pd

    from analysis.dashboard.compare import compare_panel
    from analysis.dashboard.panel import DashboardData

    runs = pd.DataFrame(
        {
            "run_id": ["tiny-1", "tiny-2"], "model": "tiny", "mode": "train", "device": "cuda",
            "precision": "fp32", "compile": False, "status": ["ok", "degraded"], "profiler": "nsys",
            "nsys_mode": "light", "forward_mean_ns": [1e6, 1.1e6], "backward_mean_ns": [2e6, 1.9e6],
            "optimizer_mean_ns": [5e5, 5e5],
        }
    )  # fmt: skip
    ka = pd.DataFrame({"Name": ["gemm"], "Total Time (ns)": [1_000_000]})
    kb = pd.DataFrame({"Name": ["gemm"], "Total Time (ns)": [1_500_000]})
    panel = compare_panel(DashboardData(runs=runs, compare=("tiny-1", "tiny-2"), compare_kernels=(ka, kb)))
    assert len(panel.figure.data) == 2  # A's and B's phases; no kernel bars
    assert (
        "Per-kernel differences left out: tiny-2 is degraded (a capture that failed its health checks): step "
        "times stand, kernel times do not." in panel.notes
    )


def test_blocks_of_a_degraded_run_read_from_its_capture_are_said_untrusted(tmp_db: str) -> None:
    """`harness blocks` of a run whose capture failed its health checks printed the capture's block times
    with nothing said: a number from a broken capture shown as sound."""
    import pandas as pd

    result = make_result("tiny-cut")
    result.config.nvtx_detail = True
    records = pd.DataFrame(
        {"step": [2, 3, 4], "layer": [0, 0, 0], "block": "attention", "phase": "forward",
         "duration_ns": [400_000, 410_000, 420_000], "calls": 1}
    )  # fmt: skip
    store = ResultsStore(tmp_db)
    save_run(store, result, profiler="nsys", nsys_mode="light", blocks=(records, "nsys"))
    store.save_advice("tiny-cut", {}, status="degraded", error="the export lost 40% of its events")
    shown = _invoke("blocks", "tiny-cut", "--db", tmp_db, "-f", "csv")
    assert shown.exit_code == 0, shown.output
    assert (
        "warning: run tiny-cut is degraded (the export lost 40% of its events): these block times are its "
        "capture's, which failed its health checks; they cannot be trusted" in shown.stderr
    )
    assert "attention" in shown.stdout  # still shown, said to be untrusted
    roof = _invoke("roofline", "tiny-cut", "--db", tmp_db, "-f", "csv")
    assert roof.exit_code == 0, roof.output
    assert "warning: run tiny-cut is degraded (the export lost 40% of its events)" in roof.stderr


def test_dashboard_of_a_database_without_runs_says_so_not_that_none_match(tmp_db: str, tmp_path) -> None:
    """A database that holds no run (attention sweeps only): no filter was given, so none can fail to
    match."""
    ResultsStore(tmp_db)  # the tables, no run
    shown = _invoke("dashboard", "--db", tmp_db, "-o", str(tmp_path / "page.html"))
    assert shown.exit_code == 0, shown.output
    assert "warning: the results database holds no runs: the page says what is missing" in shown.stderr
    assert "no run matches" not in shown.stderr
    save_run(ResultsStore(tmp_db), make_result("tiny-a"))
    shown = _invoke("dashboard", "--db", tmp_db, "--model", "nosuch", "-o", str(tmp_path / "page.html"))
    assert (
        "warning: no run matches --model nosuch (1 run in the results database; `harness runs` lists them): "
        "the page says what is missing"
    ) in shown.stderr


def test_baseline_tag_says_the_run_it_moved_from_and_warns_of_a_run_that_did_not_end_ok(tmp_db: str) -> None:
    """Re-tagging a name moved it without a word (a name typed twice lost its run); a run that did not end
    ok was tagged as if a gate against it could pass."""
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    cut = make_result("tiny-cut")
    cut.status, cut.error = "interrupted", "interrupted by SIGINT after 3 of 10 measured steps"
    save_run(store, cut)
    first = _invoke("baseline", "tag", "main", "tiny-a", "--db", tmp_db)
    assert (first.exit_code, first.stdout, first.stderr) == (0, "baseline:main = tiny-a\n", "")
    moved = _invoke("baseline", "tag", "main", "tiny-cut", "--db", tmp_db)
    assert moved.exit_code == 0
    assert moved.stdout == "baseline:main = tiny-cut (was tiny-a)\n"
    assert moved.stderr == (
        "warning: run tiny-cut ended interrupted (interrupted by SIGINT after 3 of 10 measured steps): "
        "`harness diff baseline:main RUN --gate PCT` refuses to pass against it\n"
    )
    again = _invoke("baseline", "tag", "main", "tiny-cut", "--db", tmp_db)
    assert again.stdout == "baseline:main = tiny-cut\n"  # the same run: nothing moved


def test_baseline_list_without_baselines_says_how_to_make_one(tmp_db: str) -> None:
    """An empty table with a title said nothing of why it was empty (`runs` says so in a note)."""
    save_run(ResultsStore(tmp_db), make_result("tiny-a"))
    shown = _invoke("baseline", "list", "--db", tmp_db)
    assert (shown.exit_code, shown.stdout) == (0, "")
    assert shown.stderr == "note: no baselines yet: `harness baseline tag NAME RUN` names a run\n"
    as_json = _invoke("baseline", "list", "--db", tmp_db, "-f", "json")
    assert as_json.stdout.strip() == "[]"  # scripts get the empty list


def test_diff_refuses_a_side_of_runs_of_different_configurations(tmp_db: str) -> None:
    """`diff tiny-a,small-b tiny-c,tiny-d` averaged a tiny and a small run into Mean A, with no word that
    the side mixed configurations (the one-run-a-side note compares A's first run with B's only)."""
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    save_run(store, make_result("small-b", model="small", fwd=3_000_000))
    save_run(store, make_result("tiny-c"))
    save_run(store, make_result("tiny-d"))
    shown = _invoke("diff", "tiny-a,small-b", "tiny-c,tiny-d", "--db", tmp_db)
    assert shown.exit_code == 2, shown.output
    assert shown.stderr == (
        "error: 'tiny-a,small-b': the runs of a side are of one configuration; small-b differs from tiny-a "
        "in model tiny → small\n"
    )
    assert _invoke("diff", "tiny-a,tiny-c", "tiny-d", "--db", tmp_db).exit_code == 0


def test_compare_compile_whose_filter_matches_no_run_says_so(tmp_db: str) -> None:
    """`compare-compile --model nosuch` said to run the eager and compiled runs of tiny, as if there were
    runs of nosuch without a compiled one."""
    save_run(ResultsStore(tmp_db), make_result("tiny-a"))
    shown = _invoke("compare-compile", "--model", "nosuch", "--db", tmp_db)
    assert shown.exit_code == 0, shown.output
    assert shown.stderr == (
        "note: no run matches --model nosuch (1 run in the results database; `harness runs` lists them)\n"
    )
    shown = _invoke("compare-compile", "--model", "tiny", "--db", tmp_db)
    assert "`harness run tiny --device cpu --compile`" in shown.stderr


def test_runs_lists_the_all_reduce_of_a_run_across_ranks(tmp_db: str) -> None:
    """A run across ranks times its gradient all-reduce as a phase of its step: `runs` gave its forward,
    backward and optimizer only, in every format, so the phases listed fell 4 ms short of its 7.5 ms step."""
    phases = {"forward": 1_000_000, "backward": 2_000_000, "allreduce": 4_000_000, "optimizer": 500_000}
    steps = [StepRecord(i, i < 1, dict(phases), rank=rank) for rank in range(2) for i in range(3)]
    config = RunConfig("tiny", device="cpu", warmup=1, steps=2, nproc=2)
    save_run(ResultsStore(tmp_db), RunResult("tiny-ranks", config, "ok", device="cpu", steps=steps))
    save_run(ResultsStore(tmp_db), make_result("tiny-one"))
    rows = list(csv.DictReader(io.StringIO(_invoke("runs", "--format", "csv").stdout)))
    assert [(r["run_id"], r["allreduce_mean_ns"]) for r in rows] == [
        ("tiny-ranks", "4000000.0"),
        ("tiny-one", ""),
    ]
    table = CliRunner().invoke(app, ["runs", "--wide"], env={"COLUMNS": "300"}).stdout
    assert "allreduce" in table and "4.000" in table
    alone = CliRunner().invoke(
        app, ["runs", "--wide", "--model", "tiny", "--last", "1"], env={"COLUMNS": "300"}
    )
    assert "allreduce" not in alone.stdout  # no run listed has one: no column


def test_dashboard_of_one_run_says_one_run_in_its_subtitle(tmp_db: str, tmp_path) -> None:
    """The page's subtitle said `1 runs from …`."""
    save_run(ResultsStore(tmp_db), make_result("tiny-a"))
    page = tmp_path / "page.html"
    shown = _invoke("dashboard", "--db", tmp_db, "-o", str(page))
    assert shown.exit_code == 0, shown.output
    text = page.read_text()
    assert "1 run from sqlite:///" in text and "1 runs" not in text
    save_run(ResultsStore(tmp_db), make_result("tiny-b"))
    assert _invoke("dashboard", "--db", tmp_db, "-o", str(page)).exit_code == 0
    assert "2 runs from sqlite:///" in page.read_text()


def test_the_times_runs_were_created_are_shown_with_their_zone(tmp_db: str) -> None:
    """A run's creation time is stored in UTC, and SQLite gives it back without its zone: runs, show and
    baseline list printed `2026-11-30T06:52:56`, which reads as local time beside a run id's local time."""
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    store.tag_baseline("main", "tiny-a")
    (row,) = json.loads(_invoke("runs", "--format", "json").stdout)
    created = datetime.fromisoformat(row["created_at"])
    assert created.utcoffset() is not None and created.tzinfo is not None
    assert abs((datetime.now(UTC) - created).total_seconds()) < 3600
    shown = json.loads(_invoke("show", "tiny-a", "--format", "json").stdout)["run"]["created"]
    assert shown == row["created_at"] and shown.endswith("+00:00")
    (tag,) = json.loads(_invoke("baseline", "list", "--format", "json").stdout)
    assert datetime.fromisoformat(tag["created_at"]).utcoffset() is not None


def test_baseline_list_names_the_runs_creation_and_the_tags_apart(tmp_db: str) -> None:
    """`baseline list` showed, as `created_at` beside the run id, the time the tag was made: it read as the
    run's creation time. `created_at` is the run's, as `runs` gives it; `tagged_at` is the tag's."""
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from harness.store.schema import Run

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    made = datetime(2026, 1, 2, 3, 4, 5)  # a run made long before it is tagged
    with Session(store.engine) as session, session.begin():
        session.execute(update(Run).where(Run.id == "tiny-a").values(created_at=made))
    store.tag_baseline("main", "tiny-a")
    (run,) = json.loads(_invoke("runs", "--format", "json").stdout)
    (tag,) = json.loads(_invoke("baseline", "list", "--format", "json").stdout)
    assert tag["created_at"] == run["created_at"] == "2026-01-02T03:04:05+00:00"
    assert abs((datetime.now(UTC) - datetime.fromisoformat(tag["tagged_at"])).total_seconds()) < 3600
    shown = CliRunner().invoke(app, ["baseline", "list"], env={"COLUMNS": "200"}).stdout
    assert "2026-01-02T03:04:05+00:00" in shown and "tagged_at" in shown


def test_baseline_list_says_how_each_baselines_run_ended(tmp_db: str) -> None:
    """A baseline on a run that stopped short was said once, when tagged; the list showed it as any other,
    though `diff --gate` against it cannot pass. The list gives each run's status, as `runs` does."""
    import dataclasses

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-ok"))
    save_run(
        store,
        dataclasses.replace(make_result("tiny-cut"), status="interrupted", error="interrupted by SIGINT"),
    )
    store.tag_baseline("main", "tiny-ok")
    store.tag_baseline("partial", "tiny-cut")
    tags = json.loads(_invoke("baseline", "list", "--format", "json").stdout)
    assert [(t["name"], t["run_id"], t["status"]) for t in tags] == [
        ("main", "tiny-ok", "ok"),
        ("partial", "tiny-cut", "interrupted"),
    ]
    shown = CliRunner().invoke(app, ["baseline", "list"], env={"COLUMNS": "200"}).stdout
    assert "interrupted" in shown


def test_baseline_tag_on_a_path_without_a_database_creates_none(tmp_path: Path) -> None:
    """`baseline tag` with --db a mistyped path made the folders and an empty results database there, then
    said that it held no run."""
    missing = tmp_path / "typo" / "results.sqlite"
    shown = _invoke("baseline", "tag", "main", "-1", "--db", str(missing))
    assert shown.exit_code == 1
    assert shown.stderr.startswith(f"error: no results database at {missing}")
    assert not missing.parent.exists()


def test_runs_csv_gives_a_runs_files_as_json_as_its_json_does(tmp_db: str) -> None:
    """A run's files ({kind: path}) were written to csv as Python's repr (`{'trace': '/tmp/a b.json'}`),
    which no script reads back; csv holds what --format json gives."""
    save_run(
        ResultsStore(tmp_db),
        make_result("tiny-a"),
        profiler="torch",
        artifacts={"trace": "/tmp/a b,'c'.json"},
    )
    (row,) = csv.DictReader(io.StringIO(_invoke("runs", "--format", "csv").stdout))
    (as_json,) = json.loads(_invoke("runs", "--format", "json").stdout)
    assert json.loads(row["artifacts"]) == as_json["artifacts"] == {"trace": "/tmp/a b,'c'.json"}
    assert row["optimize"] == "" and as_json["optimize"] is None


def test_show_csv_of_a_run_that_measured_no_step_keeps_the_phase_tables_header(tmp_db: str) -> None:
    """A run out of memory in its warm-up: `show -f csv` wrote its phase table as a blank line, no header,
    where every other table keeps its columns (a script reads the header after `# phases …`)."""
    result = make_result("tiny-oom")
    result.steps = result.steps[:1]  # one warm-up step, then out of memory
    result.status, result.error = "oom", "CUDA out of memory"
    save_run(ResultsStore(tmp_db), result)
    tables = _csv_tables(_invoke("show", "tiny-oom", "--db", tmp_db, "-f", "csv").stdout)
    assert tables["phases (measured steps)"] == []
    shown = _invoke("show", "tiny-oom", "--db", tmp_db, "-f", "csv").stdout
    header = shown.split("# phases (measured steps)\n", 1)[1].split("\n", 1)[0]
    assert header == "Phase,Steps,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns)"
    # for people: no empty frame with a header alone, a line saying there is nothing in it
    table = _invoke("show", "tiny-oom", "--db", tmp_db).output
    assert "phases (measured steps)\n" not in table
    assert "note: phases (measured steps): none" in table
    assert "steps\n" in table  # its warm-up step is still shown


def test_a_baseline_whose_run_is_gone_is_said_and_never_stands_for_another(tmp_db: str) -> None:
    """A baseline's run removed outside the harness: `diff baseline:main` took the stored id as a prefix and
    compared another run that begins with it, without a word; `baseline list` gave its run's time as "NaT".
    Now diff refuses in one line naming the baseline, and the list says it, its times null."""
    import sqlite3

    store = ResultsStore(tmp_db)
    for run_id in ("tiny-a", "tiny-a2", "tiny-b"):
        save_run(store, make_result(run_id))
    store.tag_baseline("main", "tiny-a")
    con = sqlite3.connect(tmp_db.removeprefix("sqlite:///"))
    con.execute("DELETE FROM runs WHERE id = 'tiny-a'")
    con.commit()
    con.close()
    r = _invoke("diff", "baseline:main", "tiny-b")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "tiny-a2" not in r.output
    assert r.stderr.strip() == (
        "error: baseline:main names run tiny-a, which is not in the results database (removed outside the "
        "harness): `harness baseline tag main RUN` names another"
    )
    listed = _invoke("baseline", "list", "--format", "json")
    assert listed.exit_code == 0, listed.output
    (tag,) = json.loads(listed.stdout)
    assert (tag["run_id"], tag["status"], tag["created_at"]) == ("tiny-a", None, None)
    assert "warning: baseline:main names run tiny-a, which is not in the results database" in listed.stderr
