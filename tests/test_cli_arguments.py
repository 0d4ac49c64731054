"""Hostile values on the command line: number options take ASCII digits alone (harness.cli.numbers), an
argument naming a run refuses an empty value before the database is opened, and each is one `error:` line,
exit 2, never click's usage block."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from typer.testing import CliRunner

from harness.cli import app, commands, load
from harness.cli.common import run_reference, run_sides
from harness.cli.numbers import AsciiNumber, number_kind, param_name
from harness.core.errors import EMPTY_RUN_ID

runner = CliRunner()


def every_command() -> list[tuple[list[str], click.Command]]:
    """(the words that name it, the command) for each command and sub-command."""
    found = []
    for name in commands():
        command = load(name)
        found.append(([name], command))
        found += [([name, sub_name], sub) for sub_name, sub in getattr(command, "commands", {}).items()]
    return found


def number_options() -> list[tuple[list[str], click.Parameter]]:
    return [
        (words, param)
        for words, command in every_command()
        for param in command.params
        if param.param_type_name == "option" and isinstance(param.type, AsciiNumber)
    ]


def one_error(result: object) -> str:
    """The one line a refused command line wrote (stdout empty), its exit 2 checked."""
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert result.stdout == "", result.stdout  # type: ignore[attr-defined]
    lines = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, result.stderr  # type: ignore[attr-defined]
    return lines[0]


def test_no_number_parameter_escapes_the_ascii_rule() -> None:
    """Every parameter click reads as a number has the rule's type, and none is read by int() or float()
    another way (a `parser=int`): a number option added later is refused as these are."""
    escaped = []
    for words, command in every_command():
        for param in command.params:
            func = getattr(param.type, "func", None)
            wrapped = isinstance(param.type, AsciiNumber)
            if (number_kind(param.type) is not None and not wrapped) or func in (int, float):
                escaped.append(f"{' '.join(words)} {param_name(param)}")
    assert escaped == []
    assert len(number_options()) > 50  # the walk found the options: run's, diff's, the tables'


@pytest.mark.parametrize("given", ["\u0663", "\uff13", "1_0", "\x1b[31m3", "0x10"])
def test_every_number_option_refuses_what_is_not_ascii_digits(tmp_path: Path, given: str) -> None:
    """int() and float() read '٣' and '３' as 3 and '1_0' as 10: `run tiny --steps ٣` ran. Each number option
    of each command refuses them in one line, exit 2, before anything is read or run."""
    db = tmp_path / "results.sqlite"
    for words, param in number_options():
        result = runner.invoke(app, [*words, param.opts[0], given], env={"HARNESS_DB": str(db)})
        whole = number_kind(param.type.inner) == "int"  # type: ignore[attr-defined]
        what = "a whole number" if whole else "a number"
        example = "8" if whole else "2.5"
        said = one_error(result)
        assert (
            said == f"error: {param.opts[0]} takes {what} in the digits 0-9 (e.g. {example}), got {given!r}"
        )
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["diff", "a", "b", "--gate", ""], "--gate is empty: give a number"),
        (["diff", "a", "b", "--gate", " "], "--gate is empty: give a number"),
        (["run", "tiny", "--steps", ""], "--steps is empty: give a whole number"),
        (["kernels", "--top", "1e3", "report.sqlite"],
         "--top takes a whole number in the digits 0-9 (e.g. 8), got '1e3'"),
        (["timeline", "--start", "1,5", "report.sqlite"],
         "--start takes a number in the digits 0-9 (e.g. 2.5), got '1,5'"),
        (["diff", "a", "b", "--gate", "1e400"], "--gate 1e400 is out of range: at most 1.798e+308"),
        (["run", "tiny", "--steps", "1" * 5000],
         f"--steps {'1' * 20}… (5000 digits) is out of range: at most {2**63 - 1}"),
    ],
)  # fmt: skip
def test_a_number_click_cannot_read_is_one_line_not_the_usage_block(
    tmp_path: Path, args: list[str], said: str
) -> None:
    result = runner.invoke(app, args, env={"HARNESS_DB": str(tmp_path / "results.sqlite")})
    assert one_error(result) == f"error: {said}"


@pytest.mark.parametrize(("given", "read"), [("3", 3), ("+3", 3), ("-2", -2), (" 4 ", 4), ("007", 7)])
def test_ascii_whole_numbers_read_as_before(given: str, read: int) -> None:
    param = next(p for p in load("diff").params if p.opts[0] == "--iteration")
    assert param.type(given, param, None) == read


@pytest.mark.parametrize(
    ("given", "read"), [("2.5", 2.5), (".5", 0.5), ("1e3", 1000.0), ("-0", 0.0), ("5.", 5.0)]
)
def test_ascii_numbers_read_as_before(given: str, read: float) -> None:
    param = next(p for p in load("diff").params if p.opts[0] == "--gate")
    assert param.type(given, param, None) == read


@pytest.mark.parametrize(
    "args",
    [
        ["show", ""],
        ["show", " "],
        ["diff", "", "latest"],
        ["diff", "latest", ""],
        ["diff", ",", "latest"],
        ["roofline", ""],
        ["blocks", ""],
        ["advise", ""],
        ["health", ""],
        ["optimize", ""],
        ["baseline", "tag", "main", ""],
        ["compare-compile", "--baseline", ""],
    ],
    ids=lambda a: " ".join(w or "''" for w in a),
)
def test_an_empty_run_reference_is_refused_before_the_database_is_opened(
    tmp_path: Path, args: list[str]
) -> None:
    """With no database, an empty run id read as a missing database (exit 1, "no results database"); an
    argument that also takes a path read it as the current folder."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, args, env={"HARNESS_DB": str(db)})
    assert one_error(result) == f"error: {EMPTY_RUN_ID}"
    assert not db.exists()


# the string arguments that name no run: a model (its own check names the models), a baseline's name
NOT_RUNS = {("run", "MODEL"), ("overhead", "MODEL"), ("baseline tag", "NAME")}


def test_every_argument_naming_a_run_refuses_an_empty_one() -> None:
    """Each string argument of every command that is not a path (those refuse an empty one as a path) names a
    run, and has the check; a new one is found here."""
    unchecked = []
    for words, command in every_command():
        for param in command.params:
            if param.param_type_name != "argument" or type(param.type).__name__ != "StringParamType":
                continue
            if (" ".join(words), param_name(param).upper()) in NOT_RUNS:
                continue
            if param.callback is None or param.callback.__name__ not in (
                run_reference.__name__,
                run_sides.__name__,
            ):
                unchecked.append(f"{' '.join(words)} {param_name(param)}")
    assert unchecked == []


@pytest.mark.parametrize(("side", "index"), [("A,,B", 0), ("A,", 0), ("A, ,B", 1)])
def test_an_empty_run_among_a_sides_runs_is_the_comma_lists_rule(
    tmp_path: Path, side: str, index: int
) -> None:
    """`diff A,,B X` is refused by the rule of every comma list, in its words, naming the side."""
    args = [side, "latest"] if index == 0 else ["latest", side]
    result = runner.invoke(app, ["diff", *args], env={"HARNESS_DB": str(tmp_path / "results.sqlite")})
    name = "AB"[index]
    assert one_error(result) == (
        f"error: {name} {side!r} has an empty item: give a comma-separated list, none empty"
    )


def test_a_cache_size_in_another_scripts_digits_is_refused_and_nothing_evicted(
    cpu_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache --max-size ٣` read '٣' as 3 (a regex's \\d takes any script's digits): a limit of 3 bytes,
    and every entry evicted. HARNESS_CACHE_LIMIT=٣GB read as 3 GB."""
    assert runner.invoke(app, ["nvtx", str(cpu_export), "-f", "csv"]).exit_code == 0  # an entry
    cached = sorted(cache_dir.rglob("*"))
    assert cached
    assert one_error(runner.invoke(app, ["cache", "--max-size", "\u0663"])) == (
        "error: not a size: '\u0663' (e.g. 5GB, 500MB)"
    )
    monkeypatch.setenv("HARNESS_CACHE_LIMIT", "\u0663GB")
    result = runner.invoke(app, ["nvtx", str(cpu_export), "-f", "csv"])
    assert result.exit_code != 0 and result.stdout == ""
    assert result.stderr == (
        "error: HARNESS_CACHE_LIMIT='\u0663GB' is not a size (e.g. 5GB, 500MB; 0 caches nothing): "
        "fix or unset it\n"
    )
    assert sorted(cache_dir.rglob("*")) == cached


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--threshold", "syncs_per_step=\u0663"], "threshold syncs_per_step takes a number, not '\u0663'"),
        (
            ["--threshold", "host_wait_share=\u0660.\u0665"],
            "threshold host_wait_share takes a number, not '٠.٥'",
        ),
        (["--threshold", "syncs_per_step=1_0"], "threshold syncs_per_step takes a number, not '1_0'"),
        (["--rule", "gpu_gaps:gap=\u0663"], "rule gpu_gaps: option gap takes an integer, not '\u0663'"),
        (["--rule", "gpu_gaps:rows=1_0"], "rule gpu_gaps: option rows takes an integer, not '1_0'"),
        (["--rule", "gpu-stav"], "unknown rule 'gpu-stav': one of"),
    ],
)
def test_advise_options_take_ascii_digits_and_a_bad_one_is_a_usage_error(args: list[str], said: str) -> None:
    """int() and float() took '٣' and '1_0' in a threshold or a rule's option; a bad --rule was exit 1, as
    a bad input, not 2, as the other bad arguments. Refused before the export is looked for."""
    result = runner.invoke(app, ["advise", "report.sqlite", *args])
    assert one_error(result).startswith(f"error: {said}")


@pytest.mark.parametrize(
    ("args", "said", "command"),
    [
        (["runs", "--device", ""],
         "Invalid value for '--device': '' is not one of 'cpu', 'cuda', 'mps', 'n/a'.", "runs"),
        (["kernels", "-f", "", "report.sqlite"],
         "Invalid value for '--format' / '-f': '' is not one of 'table', 'csv', 'json'.", "kernels"),
        (["run", "tiny", "--no-save"], "No such option: --no-save", "run"),
        (["run"], "Missing argument 'model'.", "run"),
        (["baseline", "tag"], "Missing argument 'name'.", "baseline tag"),
        (["kernel", "report.sqlite"], "No such command 'kernel'.", ""),
        (["--bogus"], "No such option: --bogus", ""),
    ],
)  # fmt: skip
def test_clicks_own_refusals_are_one_line_naming_the_help(
    tmp_path: Path, args: list[str], said: str, command: str
) -> None:
    """Click printed its usage block, a blank line and `Error: …` (four lines on stderr) for a value not
    among an option's choices, an unknown option or command, a missing argument."""
    result = runner.invoke(app, args, env={"HARNESS_DB": str(tmp_path / "results.sqlite")})
    assert (
        one_error(result) == f"error: {said} (`{' '.join(['harness', command]).strip()} -h` shows the usage)"
    )


def test_help_and_a_group_alone_still_show_the_usage() -> None:
    assert runner.invoke(app, ["run", "-h"]).stdout.startswith("Usage: harness run [OPTIONS]")
    alone = runner.invoke(app, ["baseline"])
    assert "Usage: harness baseline" in alone.output and "tag" in alone.output


@pytest.mark.parametrize(
    ("args", "option", "give"),
    [
        (["runs", "--model", ""], "--model", "a model name"),
        (["dashboard", "--model", " "], "--model", "a model name"),
        (["compare-compile", "--model", ""], "--model", "a model name"),
        (
            ["nvtx", "--dask", "", "a.sqlite", "b.sqlite"],
            "--dask",
            "the scheduler's address (tcp://host:8786)",
        ),
        (["run", "--rdzv-endpoint", "", "tiny", "--nproc", "2"], "--rdzv-endpoint", "node 0's HOST:PORT"),
        (["sweep", "--rdzv-endpoint", "", "--models", "tiny"], "--rdzv-endpoint", "node 0's HOST:PORT"),
        (
            ["diff", "--iteration-range", "", "a.sqlite", "b.sqlite"],
            "--iteration-range",
            "an NVTX range's name",
        ),
        (
            ["timeline", "--phase", "", "--step", "1", "r.sqlite", "-o", "t.json"],
            "--phase",
            "a phase's name (forward, …)",
        ),
        (["kernels", "--range", "", "a.sqlite"], "--range", "an NVTX range's name"),
        (
            ["run", "tiny", "--nsys", "--nsys-arg=--trace=cuda", "--nsys-arg", ""],
            "--nsys-arg",
            "an nsys flag (--trace=cuda, …)",
        ),
        (["profile", "--nsys-arg", " ", "--", "true"], "--nsys-arg", "an nsys flag (--trace=cuda, …)"),
        (["operators", "--range", " ", "a.sqlite"], "--range", "a range's name"),
    ],
)
def test_an_empty_option_whose_absence_means_something_is_refused(
    tmp_path: Path, args: list[str], option: str, give: str
) -> None:
    """`runs --model "$UNSET"` listed every run, `--dask ''` read in local processes, `--rdzv-endpoint ''`
    started the ranks on this machine: each read as the option left out. An empty range or phase name was
    looked for (exit 1, `--iteration-range : no NVTX range of that name`)."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, args, env={"HARNESS_DB": str(db)})
    assert one_error(result) == f"error: {option} is empty: give {give}, or leave {option} out"
    assert not db.exists()


def test_every_table_option_naming_something_refuses_an_empty_one(tmp_path: Path) -> None:
    """A table's text option left out by default (`kernels --range NAME`) refuses '' in one line, exit 2:
    `kernels --range ''` looked for a range of no name and ended with exit 1."""
    from analysis import tables

    refused = []
    for table in tables.all():
        for option in table.options:
            if option.kind is str and not option.choices and option.default is None:
                result = runner.invoke(app, [table.name, option.flag, "", str(tmp_path / "a.sqlite")])
                said = f"error: {option.flag} is empty: give {option.names}, or leave {option.flag} out"
                assert one_error(result) == said
                refused.append(f"{table.name} {option.flag}")
    assert {"kernels --range", "operators --range"} <= set(refused)


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (
            ["runs", "--db", " "],
            {},
            "--db is empty: give a database path or URL, or leave --db out for the default",
        ),
        (
            ["runs", "--db", ""],
            {},
            "--db is empty: give a database path or URL, or leave --db out for the default",
        ),
        (
            ["runs"],
            {"HARNESS_DB": " "},
            "HARNESS_DB=' ' is blank: give a database path or URL, or unset it for the default database",
        ),
        (
            ["run", "tiny", "--device", "cpu"],
            {"HARNESS_DB": "\t"},
            "HARNESS_DB='\\t' is blank: give a database path or URL, or unset it for the default database",
        ),
    ],
)
def test_a_blank_database_is_refused_naming_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], said: str
) -> None:
    """A --db or HARNESS_DB of spaces named a file of that name in the current folder (`run` created it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    assert one_error(runner.invoke(app, args, env=env)) == f"error: {said}"
    assert list(tmp_path.iterdir()) == []


def test_a_database_with_a_line_end_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HARNESS_DB read with its line end (or a CRLF file's \\r): `run` created a database whose name ends
    in it."""
    monkeypatch.chdir(tmp_path)
    for end in ("\n", "\r"):
        db = f"{tmp_path}/results.sqlite{end}"
        said = f"error: HARNESS_DB={db!r} holds a control character (a line end read with the value?)"
        for args in (["runs"], ["run", "tiny", "--device", "cpu"]):
            assert one_error(runner.invoke(app, args, env={"HARNESS_DB": db})).startswith(said)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("db", ["DIR", "sqlite://"])
def test_a_harness_db_no_command_can_use_is_named_as_harness_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: str
) -> None:
    """A HARNESS_DB that is a folder or in memory was said as `--db …`, an option the user never gave."""
    db = str(tmp_path) if db == "DIR" else db
    for args in (["runs"], ["run", "tiny", "--device", "cpu"]):
        said = one_error(runner.invoke(app, args, env={"HARNESS_DB": db}))
        assert said.startswith(f"error: HARNESS_DB={db} is a "), said
    doctor = runner.invoke(app, ["doctor", "--no-self-test", "--format", "csv"], env={"HARNESS_DB": db})
    assert doctor.exit_code == 1
    assert f"results database,fail,HARNESS_DB={db} is a " in doctor.stdout.replace('"', "")


def test_an_empty_harness_db_is_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HARNESS_DB='' reads the default database, as every HARNESS_* variable set empty is unset (and click
    reads an option's variable): `HARNESS_DB= harness runs` is how a shell unsets it for one command."""
    from harness.store.location import resolve_url

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("HARNESS_DB", "")
    default = tmp_path / "harness" / "results.sqlite"
    assert resolve_url(None) == f"sqlite:///{default}"
    result = runner.invoke(app, ["runs"])
    assert result.exit_code == 1 and str(default) in result.stderr, result.output


@pytest.mark.parametrize("name", ["", " "])
def test_an_empty_baseline_name_is_refused_before_the_database_is_opened(tmp_path: Path, name: str) -> None:
    """With no database there, `baseline tag "" RUN` was said as a missing database (exit 1)."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, ["baseline", "tag", name, "latest"], env={"HARNESS_DB": str(db)})
    assert one_error(result) == f"error: {name!r} is not a baseline name: it is empty"
    assert not db.exists()


def test_a_misspelt_option_of_profile_is_not_taken_for_the_program(tmp_path: Path) -> None:
    """`profile` passes the words it does not know on to the program: `--nam x -- true` said "program
    '--nam' is not found on PATH"."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, ["profile", "--nam", "x", "--", "true"], env={"HARNESS_DB": str(db)})
    assert one_error(result) == (
        "error: No such option: --nam (`harness profile -h` shows the usage; the program and its arguments "
        "follow --)"
    )
    assert not db.exists()


def test_a_typed_minus_zero_is_zero() -> None:
    """`diff A B --gate -0` passes `at_least(0)` and was said "a regression of -0%"."""
    import math

    from harness.cli.common import at_least

    gate = at_least("--gate", 0)(-0.0)
    assert gate == 0 and math.copysign(1, gate) == 1 and f"{gate:g}" == "0"
    assert at_least("--top", 1)(3) == 3
