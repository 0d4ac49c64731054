"""What every command shares: one-line errors and warnings, the --format, --wide, --limit and --db options,
and where a written file may go (analysis.outputs: never over a file the command reads, `-` and pipes
written as streams; the commands take its checks from here, and --db its check that the command's own
output is not redirected into the database)."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer
from typer.core import TyperCommand

from analysis.errors import DECIMAL as DECIMAL
from analysis.errors import WHOLE as WHOLE
from analysis.errors import AnalysisError
from analysis.errors import comma_list as comma_list
from analysis.outputs import OutputRefused, refuse_folder_name, refuse_streams_over, refuse_unmakeable
from analysis.outputs import is_stdout as is_stdout
from analysis.outputs import is_stream as is_stream
from analysis.outputs import make_folders as make_folders
from analysis.outputs import refuse_inputs as refuse_inputs
from analysis.outputs import shown as shown
from analysis.outputs import write_text as write_text
from harness.cli.terminal.output import Format, say
from harness.core import signals
from harness.core.bounds import INT64_MAX, check_count
from harness.core.errors import EMPTY_RUN_ID, HarnessError, UsageError, os_reason
from harness.store import leaving
from harness.store.location import env_db, resolve_url, sqlite_file
from workloads.names import NOT_APPLICABLE, PRECISIONS

F = TypeVar("F", bound=Callable[..., Any])


def wide_where_it_shows(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """--format's and --wide's check, given or not (click calls it for each, in the order it reads them, so
    the second sees both): --wide beside a format other than table changes nothing (csv, json and markdown
    hold every column and name whole). Warned of, once, not refused: a script that switches --format keeps
    the rest of its line."""
    seen = ctx.meta.setdefault("harness.wide", {})
    seen["wide" if "--wide" in param.opts else "format"] = value
    fmt = str(getattr(seen.get("format"), "value", seen.get("format")))
    if seen.get("wide") and "format" in seen and fmt != Format.table.value and not seen.get("said"):
        seen["said"] = True
        warn(f"--wide fits tables to the terminal; --format {fmt} writes every column and name whole: it "
             "changes nothing")  # fmt: skip
    return value


FormatOpt = Annotated[
    Format,
    typer.Option(
        "--format", "-f", callback=wide_where_it_shows,
        help="table for people; csv or json for scripts (times in ns).",
    ),
]  # fmt: skip
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide", callback=wide_where_it_shows,
        help="Show every column and whole names, however wide (default: fit the terminal).",
    ),
]  # fmt: skip


class OptionRefused(typer.BadParameter):
    """A value refused while the options are read, before the command runs: one `error:` line and exit 2,
    as the command's own errors (not click's usage block)."""

    def show(self, file: Any = None) -> None:
        err(self.message)


# click's UsageError, of the copy of click Typer brings (Typer exports BadParameter alone of its errors)
ClickUsageError: type[Exception] = typer.BadParameter.__mro__[1]


class UsageInOneLine(ClickUsageError):  # type: ignore[misc,valid-type]
    """Click's own refusal of a command line (an unknown option, a value not among the choices, a missing
    argument) as one `error:` line, where click printed its usage block, a blank line and `Error: …`."""

    def show(self, file: Any = None) -> None:
        err(self.message, lines=False)


@contextlib.contextmanager
def usage_in_one_line() -> Iterator[None]:
    """Click's usage errors raised within as one line naming the command's help (UsageInOneLine); those
    that show themselves otherwise (OptionRefused; `harness baseline` alone, which prints its help) as
    they are."""
    try:
        yield
    except ClickUsageError as e:
        if type(e).show is not ClickUsageError.show:  # type: ignore[attr-defined]
            raise
        ctx = getattr(e, "ctx", None)
        where = f" (`{ctx.command_path} -h` shows the usage)" if ctx is not None else ""
        raise UsageInOneLine(f"{e.format_message()}{where}", ctx=ctx) from None  # type: ignore[attr-defined]


# what a path parameter names, by its metavar (a parameter of click's Path type names a path too)
PATH_METAVARS = {"<file>": "a file name", "<dir>": "a folder", "<path>": "a path"}


class NotEmpty:
    """A path parameter's type: an empty value refused, before the parameter's own type (`inner`, to which
    all else is left) reads it. Click takes '' as a path and a Path of it is '.': an unset shell variable
    (`harness kernels "$REPORT"`) named the current folder, its exports read, files written into it, its
    cache entries cleared. A wrapper, not a subclass: Typer may bring its own copy of click's types."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __call__(self, value: Any, param: Any = None, ctx: Any = None) -> Any:
        self.refuse_empty(value, param)
        return self.inner(value, param, ctx)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        self.refuse_empty(value, param)
        return self.inner.convert(value, param, ctx)

    @staticmethod
    def refuse_empty(value: Any, param: Any) -> None:
        if param is None or not isinstance(value, str | os.PathLike) or os.fspath(value) != "":
            return
        named = param.opts[0] if param.param_type_name == "option" else param.metavar or param.name.upper()
        raise OptionRefused(f"{named} is empty: give {PATH_METAVARS.get(param.metavar or '', 'a path')}")


def given_or_left_out(option: str, give: str) -> Callable[[Any], Any]:
    """The callback of a text option whose absence means something (every model, local processes, one
    machine): an empty or blank value (`--model "$UNSET"`) is one `error:` line and exit 2, not read as the
    option left out. Of a repeatable option, each value."""

    def check(value: Any) -> Any:
        values = value if isinstance(value, list | tuple) else [value]
        if any(v is not None and not v.strip() for v in values):
            raise OptionRefused(f"{option} is empty: give {give}, or leave {option} out")
        return value

    return check


def refuse_empty_paths(command: click.Command) -> None:
    """Every path parameter of `command` and of its sub-commands (of click's Path type, or a metavar of
    PATH_METAVARS) refuses an empty value: one `error:` line and exit 2, before anything is read or
    written."""
    for param in command.params:
        named_path = getattr(param.type, "name", "") == "path" or param.metavar in PATH_METAVARS
        if named_path and not isinstance(param.type, NotEmpty):
            param.type = NotEmpty(param.type)  # type: ignore[assignment]
    for sub in getattr(command, "commands", {}).values():
        refuse_empty_paths(sub)


def at_least(option: str, low: int, most: int | None = None) -> Callable[[Any], Any]:
    """The callback of a number option that takes `low` or more (and `most` or less, where given): another
    is one `error:` line and exit 2 (click's `min=` printed its usage block and a capitalised `Error:`)."""

    def check(value: Any) -> Any:
        shown = f"{value:g}" if isinstance(value, float) else str(value)  # an int whole, not as 1e+18
        if value is not None and -math.inf < value < low:  # -inf, nan: the command's own check says why
            raise OptionRefused(f"{option} must be {low} or more, got {shown}")
        if value is not None and most is not None and value > most:
            raise OptionRefused(f"{option} must be {most} or less, got {shown}")
        return value + 0 if isinstance(value, float) else value  # a typed -0 is 0 ("-0%" said nothing else)

    return check


def check_finite_positive(option: str, value: float | None, what: str) -> None:
    """UsageError unless `value` (None: not given) is a positive finite number: not `<= 0`, which nan
    passes (a nan target is never reached, a nan budget never spent)."""
    if value is not None and not 0 < value < math.inf:
        raise UsageError(f"{option} must be a positive {what}, got {value:g}")


def positive_ints(option: str, text: str | None, example: str) -> list[int]:
    """The positive whole numbers of comma-separated option `option` (`--batch-sizes`, `--head-dims`), in the
    order given, duplicates dropped: the rule of every such option. Each is ASCII digits, as any number on
    the command line (int() reads '٣' as 3); one past int64 is refused, as the database stores no more."""
    items = comma_list(option, text)
    bad = [t for t in items if not (t.isascii() and t.isdigit() and t.strip("0"))]
    if bad or not items:
        raise UsageError(f"{option} takes positive integers, e.g. {example}; got {', '.join(bad) or 'none'}")
    for t in items:
        whole = t.lstrip("0")
        if len(whole) > len(str(INT64_MAX)):  # int() refuses over 4,300 digits with a ValueError
            raise UsageError(
                f"{option} {whole[:20]}… ({len(whole)} digits) is out of range: at most {INT64_MAX}"
            )
        check_count(option, int(whole))
    return list(dict.fromkeys(int(t) for t in items))


def count_option(flag: str, low: int, help: str, *short: str, most: int | None = None) -> Any:
    """A whole-number option of `low` or more, and `most` or less where given (`<n>` in the help): another
    is refused by at_least."""
    return typer.Option(flag, *short, callback=at_least(flag, low, most), metavar="<n>", help=help)


def text_option(flag: str, metavar: str, give: str, help: str, **more: Any) -> Any:
    """A text option whose absence means something: an empty or blank value is refused by
    given_or_left_out, which says to give `give` instead."""
    return typer.Option(flag, metavar=metavar, callback=given_or_left_out(flag, give), help=help, **more)


LimitOpt = Annotated[
    int | None,
    count_option(
        "--limit",
        0,
        "Tables: show the first N rows (0: all; default: as many as fit the terminal). csv and json keep "
        "every row.",
    ),
]


def on_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether parameter `name` was given on the command line (not its default, nor an environment
    variable such as HARNESS_DB)."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


def database_not_the_output(ctx: typer.Context, param: typer.CallbackParam, db: str | None) -> str | None:
    """--db's check, whether given or not (HARNESS_DB, the default file): the database is not where this
    command's standard output or error is redirected (`harness runs >> results.sqlite` would damage it).
    An empty or blank --db is refused: it read as no --db, and the default database was used unasked; a
    blank HARNESS_DB too, named (an empty one is unset: harness.store.location), or one with a line end."""
    if getattr(ctx.get_parameter_source(param.name or "db"), "name", "") == "ENVIRONMENT":
        try:
            env_db()
        except UsageError as e:
            raise OptionRefused(str(e)) from None
    if db is not None and not db.strip():
        raise OptionRefused("--db is empty: give a database path or URL, or leave --db out for the default")
    try:
        refuse_streams_over([sqlite_file(resolve_url(db))])
    except OutputRefused as e:
        raise OptionRefused(str(e)) from None
    return db


# the filters of the commands over stored runs
ModelOpt = Annotated[
    str | None,
    text_option("--model", "<name>", "a model name", "Only this model."),
]
# the device types runs are stored with (n/a: a program's, as `harness runs` lists it): another word (gpu)
# matched no run, silently
STORED_DEVICES = ("cpu", "cuda", "mps")
StoredDevice = StrEnum("StoredDevice", [(v, v) for v in (*STORED_DEVICES, NOT_APPLICABLE)])  # type: ignore[misc]
DeviceOpt = Annotated[
    StoredDevice | None,
    typer.Option(
        metavar="<type>",
        help=f"Only this device type ({', '.join(STORED_DEVICES)}; {NOT_APPLICABLE}: a program's run, "
        "`harness profile -- CMD`).",
    ),
]
# the precisions runs are stored with (n/a: a program's, as `harness runs` lists it): another spelling (FP32)
# matched no run, silently
STORED_PRECISIONS = (*PRECISIONS, NOT_APPLICABLE)
StoredPrecision = StrEnum("StoredPrecision", [(v, v) for v in STORED_PRECISIONS])  # type: ignore[misc]
PrecisionOpt = Annotated[
    StoredPrecision | None,
    typer.Option(
        metavar="<name>",
        help=f"Only this precision ({', '.join(PRECISIONS)}; {NOT_APPLICABLE}: a program's run, `harness "
        "profile -- CMD`).",
    ),
]
LastOpt = Annotated[int | None, count_option("--last", 1, "Only the newest N runs.")]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="HARNESS_DB",
        metavar="<url>",
        callback=database_not_the_output,
        help="Results database: a path or any SQLAlchemy URL.",
    ),
]


def output_file(option: str) -> Callable[[str | Path], Path]:
    """The parser of `option`, naming a file to write: a name ending in a slash names a folder and is
    refused while the slash is still there (a Path drops it, and the file took the folder's name); a file
    whose missing folders could not be created is refused before any work."""

    def parse(given: str | Path) -> Path:
        try:
            refuse_folder_name(given, option)
        except OutputRefused as e:
            raise OptionRefused(str(e)) from None
        return _makeable(given, option)

    return parse


def output_folder(option: str) -> Callable[[str | Path], Path]:
    """The parser of `option`, naming a folder to write files in: one that could not be created is refused
    before any work."""
    return lambda given: _makeable(given, option, folder=True)


def _makeable(given: str | Path, option: str, folder: bool = False) -> Path:
    """`given` as a Path, or OptionRefused when the folders it needs could not be created."""
    try:
        refuse_unmakeable(given, folder=folder)
    except OutputRefused as e:
        raise OptionRefused(f"{e}; pass {option} to a writable path") from None
    return Path(given)


def file_option(name: str, *aliases: str, help: str, show_default: bool = True) -> Any:
    """A Typer option naming a file the command writes (`--out`, `--html`), parsed by `output_file`."""
    return typer.Option(
        name, *aliases, metavar="<file>", parser=output_file(name), show_default=show_default, help=help
    )


# `--output`, the old name of `--out` (hidden), for the commands whose output is one file
OldOutputOpt = Annotated[
    Path | None, typer.Option("--output", hidden=True, metavar="<file>", parser=output_file("--output"))
]


def refuse_page_on_stdout(html: Path | None) -> None:
    """--html beside tables: `-` would put the page among the tables on standard output."""
    if html is not None and is_stdout(html):
        raise UsageError("--html - would put the page among the tables on standard output: give a file name")


def one_out(out: Path | None, alias: Path | None, option: str = "--out") -> Path:
    """The file a command writes: `--out` (or `-o`), or its hidden old name (`--output`); both only when
    they agree."""
    if out is not None and alias is not None and out != alias:
        raise UsageError(f"{option} {out} and --output {alias} name two files; give one")
    target = out if out is not None else alias
    if target is None:
        raise UsageError(f"give the file to write: {option} FILE (- for standard output)")
    return target


# a run counted from the newest: -1, -2, ...; or several a side beginning with one (`diff -3,-2,-1 B`): no
# option looks like either
NEWEST = re.compile(r"-[1-9][0-9]*(,.*)?")
RUN_REF_HELP = "a run id (or a unique prefix), `latest`, or -1, -2, … counted from the newest"


def run_reference(value: str | None) -> str | None:
    """The callback of a parameter naming a stored run (or a path, or a model): an empty or blank one
    (`harness show "$UNSET"`) is one `error:` line and exit 2 before the database is opened; with no
    database it read as a missing database, and a path it names would be the current folder."""
    if value is not None and not value.strip():
        raise OptionRefused(EMPTY_RUN_ID)
    return value


def run_sides(param: typer.CallbackParam, value: str) -> str:
    """The callback of `diff`'s sides: a run reference each, or several comma-separated (A1,A2,A3), none
    empty, by every comma list's rule (comma_list)."""
    try:
        named = comma_list(param.metavar or (param.name or "").upper(), value)
    except AnalysisError as e:
        raise OptionRefused(str(e)) from None
    if not named:  # '', ' ', ','
        raise OptionRefused(EMPTY_RUN_ID)
    return value


class RunRefCommand(TyperCommand):
    """A command that takes run ids: `-1`, `-2`, … are run references, not options (click would refuse
    them as unknown options). Every other dash word must be an option the command has: a misspelt one is
    reported as itself."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        words = args[: args.index("--")] if "--" in args else args
        if any(NEWEST.fullmatch(a) for a in words):
            known = {o for p in self.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
            dashed = [a.split("=", 1)[0] for a in words if a.startswith("-") and not NEWEST.fullmatch(a)]
            unknown = [a for a in dashed if a not in known]
            if unknown:  # click names the misspelt option, not the -N beside it
                return super().parse_args(ctx, [a for a in args if not NEWEST.fullmatch(a)])
            ctx.ignore_unknown_options = True
        return super().parse_args(ctx, args)


@contextlib.contextmanager
def writing(path: Path, option: str) -> Iterator[None]:
    """A file the user named with `option` that cannot be written: one line naming it and why."""
    try:
        yield
    except OSError as e:
        raise HarnessError(
            f"cannot write {path}: {os_reason(Path(path), e)}; pass {option} to a writable path"
        ) from None


def err(message: str, *, lines: bool = True) -> None:
    """An error; it may span lines (a failed program's last lines of output follow it), unless not `lines`:
    then a newline in it (from a name it quotes, a file's) is shown as `\\n`, as a warning's is."""
    say("error:", "bold red", message, lines=lines)


def warn(message: str) -> None:
    """A warning, on one line: a newline in it (from a name it quotes) is shown as `\\n`."""
    say("warning:", "yellow", message)


def warn_skipped(skipped: dict[str, str] | None) -> None:
    """The tables a report left out for want of data (title: why), a warning per reason naming them."""
    by_reason: dict[str, list[str]] = {}
    for title, why in (skipped or {}).items():
        by_reason.setdefault(why, []).append(title.split(" (")[0])
    for why, titles in by_reason.items():
        warn(f"skipped {', '.join(titles)}: {why}")


def note(message: str, *, lines: bool = False) -> None:
    """A note, on one line unless `lines` (a program's last lines of output, under their heading)."""
    say("note:", "", message, lines=lines)


def say_ending(outcome: Any) -> None:
    """How a profiled run ended, after its tables: its notes as warnings, then its error and the runs the
    database would not take (harness.profilers.base.Outcome, with `notes`)."""
    for line in outcome.notes:
        warn(line)
    if outcome.error:
        err(outcome.error)
    for line in outcome.unsaved:
        err(line)


def denied(path: Path) -> str:
    """Why `path` could not be used, where the system said permission denied: the first folder above it
    this user cannot search (no x permission), if one is, else the path itself."""
    for folder in reversed(path.absolute().parents):
        if not os.access(folder, os.X_OK):
            return f"cannot reach {path}: this user may not search the folder {folder} (no x permission)"
    return f"cannot use {path}: permission denied (check its mode and owner)"


def cli_errors(fn: F) -> F:
    """Turn a HarnessError into one line on stderr and its exit code; never a traceback. A signal that no
    command caught (Ctrl-C in a command that only reads) ends with one line saying so, as the run commands
    say theirs, and the signal's exit code (130 for SIGINT). A run a read over several runs left out (damaged:
    harness.store.leaving) is a line each after the command's output, and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with leaving.leaving_out() as left_out:
            try:
                done = fn(*args, **kwargs)
            except (typer.Exit, click.exceptions.Exit) as e:  # its own exit code, after what it said
                if _said_left_out(left_out) and not e.exit_code:
                    raise typer.Exit(1) from None
                raise
            except (HarnessError, AnalysisError) as e:
                _said_left_out(left_out)
                # the errors of both are one line each: a newline in one is from a name it quotes (a file's)
                err(str(e), lines=False)
                raise typer.Exit(e.exit_code) from None
            except PermissionError as e:
                # a path the user named, or one in a folder they cannot search: checking it (is_file, exists)
                # raises wherever it is looked at, so it is said here once for every command
                if e.filename is None:
                    raise
                err(denied(Path(os.fsdecode(e.filename))), lines=False)
                raise typer.Exit(1) from None
            except KeyboardInterrupt as e:  # typer would end with 130 and not a word
                sig = signals.signal_of(e)
                err(signals.interrupted(sig, "before the command finished"))
                raise typer.Exit(signals.exit_code(sig)) from None
            if _said_left_out(left_out):
                raise typer.Exit(1)
            return done

    return wrapper  # type: ignore[return-value]


def _said_left_out(left_out: dict[str, str]) -> bool:
    """Each run a read over several left out (harness.store.leaving), a line; whether there was one."""
    for line in left_out.values():
        err(line, lines=False)
    return bool(left_out)
