"""`nsys profile` around a command: the command line built by capability, the run supervised, and a
report (exported to SQLite) kept even when the run is cut short; one report per rank for torchrun."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import NsysError, UsageError, os_reason
from harness.core.signals import name
from harness.execution import supervisor
from harness.execution.nsys.export import (
    _existing,
    _left_qdstrm,
    _program_tail,
    _tail,
    export_sqlite,
    import_qdstrm,
    writing_report,
)
from harness.execution.nsys.find import NsysInfo
from workloads.names import MEASURED as MEASURED_RANGE  # around the measured steps (nvtx_ranges opens it)

DEFAULT_TRACE = ("cuda", "osrt", "nvtx")

LIGHT_ARGS = ("--sample=none", "--cpuctxsw=none")
GRAPH_TRACE = "--cuda-graph-trace=node"
SHORT_FLAGS = {
    "-t": "trace",
    "-s": "sample",
    "-o": "output",
    "-c": "capture-range",
    "-p": "nvtx-capture",
    "-f": "force-overwrite",
    "-x": "stop-on-exit",
    "-b": "backtrace",
    "-d": "duration",
    "-y": "delay",
}


@dataclass
class ProfileOptions:
    output: Path  # report path without extension
    trace: tuple[str, ...] = DEFAULT_TRACE
    python_backtrace: str | None = "cuda"
    capture: str = "all"  # all | measured
    mode: str = "light"  # light | full
    extra_args: list[str] = field(default_factory=list)
    export_sqlite: bool = True


def _flag_name(arg: str) -> str | None:
    if arg.startswith("--"):
        return arg[2:].split("=", 1)[0]
    if arg.startswith("-") and len(arg) >= 2:
        return SHORT_FLAGS.get(arg[:2])
    return None


def capture_range_in(args: Sequence[str]) -> str | None:
    """The capture range `args` (nsys profile's) ask for, as given (`--capture-range=nvtx`, `-c nvtx`);
    None: none, nsys records from the program's start."""
    for i, arg in enumerate(args):
        if arg.startswith("--capture-range=") or arg.startswith("-c="):
            return arg
        if arg in ("--capture-range", "-c") and i + 1 < len(args):
            return f"{arg} {args[i + 1]}"
    return None


def duration_in(args: Sequence[str]) -> str | None:
    """The --duration `args` (nsys profile's) give, as given (`--duration=5`, `-d 5`); None: none. nsys
    ends the program with SIGTERM when it runs out, unless --kill=none is given too."""
    for i, arg in enumerate(args):
        if arg.startswith(("--duration=", "-d=")):
            return arg
        if arg in ("--duration", "-d") and i + 1 < len(args):
            return f"{arg} {args[i + 1]}"
    return None


KILL_SIGNALS = {"sigterm": 15, "sigkill": 9}


def duration_kill_in(args: Sequence[str]) -> tuple[str, int] | None:
    """The --duration `args` give and the signal nsys ends the program with when it runs out (--kill, as
    given: sigterm, the default, sigkill or a number); None: no --duration, or --kill=none."""
    limit = duration_in(args)
    if limit is None:
        return None
    kill = "sigterm"
    for i, arg in enumerate(args):
        if arg.startswith("--kill="):
            kill = arg.removeprefix("--kill=")
        elif arg == "--kill" and i + 1 < len(args):
            kill = args[i + 1]
    kill = kill.strip().lower()
    sig = KILL_SIGNALS.get(kill, int(kill) if kill.isdigit() else None)
    return None if sig is None else (limit, sig)


def check_extra_args(args: Sequence[str], flags: frozenset[str] = frozenset()) -> None:
    """--nsys-arg words nsys would read as the program or as a flag's value: a word that is no flag nor the
    value of the flag before it would be run in place of the program given, and a last flag of nsys (one of
    SHORT_FLAGS, or of `flags`: this nsys's) with its value missing would take the program's name for it
    (every flag of `nsys profile` takes a value). A flag nsys does not know is left to nsys to refuse."""
    for i, arg in enumerate(args):
        before = args[i - 1] if i else ""
        if arg.startswith("-") or (before.startswith("-") and "=" not in before):
            continue
        raise UsageError(
            f"--nsys-arg {arg!r} is not an nsys flag: nsys would run it as the program, in place of the one "
            "given; give each flag with its value in one word (--nsys-arg=--duration=5)"
        )
    last = args[-1] if args else ""
    known = last in SHORT_FLAGS or last.removeprefix("--") in {*SHORT_FLAGS.values(), *flags}
    if known and last.startswith("-") and "=" not in last and last not in ("-h", "--help"):
        given = f"--nsys-arg={last}=VALUE" if last.startswith("--") else f"--nsys-arg={last} --nsys-arg=VALUE"
        raise UsageError(
            f"--nsys-arg {last!r} has no value: nsys would take the program for it; give it ({given})"
        )


def build_profile_command(
    info: NsysInfo, opts: ProfileOptions, target: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The `nsys profile` argv and the requested flags this nsys does not support (dropped).

    `extra_args` come last and replace any default flag of the same name.
    """
    check_extra_args(opts.extra_args, info.flags)
    defaults = [f"--trace={','.join(opts.trace)}"]
    if "cuda" in opts.trace:
        # each kernel of a CUDA graph, not one record per replay: nsys 2023.4 under CUDA 13 recorded nothing
        # of a replay traced whole (an H100, docs/gpu.md), and kernel tables want the kernels either way
        defaults.append(GRAPH_TRACE)
    if opts.python_backtrace:
        defaults.append(f"--python-backtrace={opts.python_backtrace}")
    if opts.mode == "light":
        defaults += LIGHT_ARGS
    if opts.capture == "measured":
        defaults += [
            "--capture-range=nvtx",
            f"--nvtx-capture={MEASURED_RANGE}",
            "--capture-range-end=stop",
        ]
    defaults.append(f"--output={_literal_output(opts.output)}")
    if requested_output(opts.extra_args) is None:  # a report named by the user is never written over
        defaults.append("--force-overwrite=true")
    # nsys's own export expands the %% of --output again (2023.4: the export fell back to /tmp): the
    # harness exports such a report itself (`profile`), where `nsys export --output` is taken as it is
    if opts.export_sqlite and "%" not in _literal_output(opts.output).removesuffix(RANK_PATTERN):
        defaults.append("--export=sqlite")
    overridden = {_flag_name(a) for a in opts.extra_args} - {None}
    argv = [str(info.path), "profile"]
    dropped = []
    for arg in defaults:
        name = _flag_name(arg)
        if name in overridden:
            continue
        if info.flags and not info.supports(arg):
            dropped.append(f"{arg} (nsys {info.version} does not support it)")
            continue
        argv.append(arg)
    return [*argv, *opts.extra_args, *target], dropped


def _literal_output(output: Path) -> str:
    """The report's path as `nsys profile --output` reads it: nsys expands %p, %h, %q{VAR}, … there, so a
    `%` of the path (a --profile-dir named `runs%p`) is written `%%`; the rank pattern the harness appends
    (RANK_PATTERN) is kept. Unescaped, nsys wrote to a folder that did not exist and fell back to /tmp."""
    text = str(output)
    kept = RANK_PATTERN if text.endswith(RANK_PATTERN) else ""
    return text[: len(text) - len(kept)].replace("%", "%%") + kept


@dataclass
class ProfileResult:
    returncode: int  # the profiled program's exit code as nsys reports it; negative: killed by a signal
    rep: Path | None
    sqlite: Path | None
    qdstrm: Path | None
    stderr_tail: str  # the last lines of the program's output and nsys's, together
    program_tail: str = ""  # the last lines the program printed, before nsys's closing lines
    command: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: int | None = None  # the first signal that came (SIGINT: Ctrl-C), if any
    held: bool = False  # it came after the program had ended and was held: the report was let finish
    artifacts: dict[str, str] = field(default_factory=dict)  # more files to store: one report per rank
    output: str = ""  # the end of the program's output and nsys's, together, as kept
    dropped: int = 0  # bytes of that output before the end kept


def _env_for(opts: ProfileOptions, env: dict[str, str] | None) -> dict[str, str]:
    full = dict(os.environ if env is None else env)
    if opts.capture == "measured":
        # nsys matches --nvtx-capture against registered strings only, unless told otherwise
        full.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
    return full


def requested_output(extra_args: Sequence[str]) -> str | None:
    """The report name given with --output/-o among the pass-through arguments (the last one wins)."""
    found = None
    for i, arg in enumerate(extra_args):
        if arg.startswith("--output="):
            found = arg.split("=", 1)[1]
        elif arg in ("--output", "-o") and i + 1 < len(extra_args):
            found = extra_args[i + 1]
    return found


def report_base(opts: ProfileOptions) -> Path | None:
    """The report path without extension that nsys will write; None when it holds nsys's %-patterns."""
    given = requested_output(opts.extra_args)
    if given is None:
        return Path(opts.output)
    if "%" in given:
        return None
    path = Path(given).expanduser().absolute()
    return path.with_suffix("") if path.suffix in (".nsys-rep", ".qdrep") else path


def _generated(nsys_output: str) -> list[Path]:
    """The files nsys lists under "Generated:" at its end (it falls back to /tmp where it cannot write)."""
    found: list[Path] = []
    lines = [ln.rsplit("\r", 1)[-1] for ln in nsys_output.splitlines()]
    for i, line in enumerate(lines):
        if line.strip() == "Generated:":
            for item in lines[i + 1 :]:
                if not item.startswith((" ", "\t")) or not item.strip():
                    break
                found.append(Path(item.strip()))
    return found


# nsys's own failure, not the program's: seen once from nsys 2023.4 in a CI-like run on 2 cores (the same
# test passed 3 of 3 alone): "Connection to Agent lost. This is most likely a bug. Internal reason: 'End of
# file'."
AGENT_LOST = "Connection to Agent lost"


def _agent_lost(done: supervisor.Finished, base: Path | None) -> bool:
    """Whether nsys failed on its own agent and left no report: worth one more capture."""
    if done.interrupted or done.returncode == 0 or AGENT_LOST not in done.stdout:
        return False
    left = [p for p in _generated(done.stdout) if p.is_file()]
    if base is not None:
        left += [p for p in (base.with_name(base.name + s) for s in (".nsys-rep", ".qdstrm")) if p.is_file()]
    return not left


def profile(
    info: NsysInfo,
    opts: ProfileOptions,
    target: Sequence[str],
    env: dict[str, str] | None = None,
    cleanup: Sequence[Path] = (),
    progress: Callable[[str], None] | None = None,
) -> ProfileResult:
    """Run `target` under `nsys profile`; import a left-over .qdstrm and export SQLite where nsys did not.

    nsys runs under harness.execution.supervisor: it and everything it starts end with the harness, and
    `cleanup` folders go with them. Ctrl-C and SIGTERM are passed on to nsys, which stops collection, passes
    the signal to the program and writes what was recorded. Once the program has ended and the report is
    being written (by nsys, or by the harness's own import and export), the first signal is held and the
    report let finish: nsys told to stop then deletes all it recorded. `progress` is told so at once; a
    further signal stops the writing. A report name given with --nsys-arg=--output is followed. Where nsys
    loses its own agent and writes no report, the capture is made once more, and said so.
    """

    argv, _ = build_profile_command(info, opts, target)
    base = report_base(opts)
    if base is not None:
        try:
            base.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise NsysError(
                f"cannot create the report's folder {base.parent}: {os_reason(base.parent, e)}"
            ) from None
    notes: list[str] = []

    def hold(sig: int, text: str, processes: list[tuple[str, str]]) -> bool:
        if not writing_report(text, processes):
            return False
        if progress is not None:
            progress(f"{name(sig)} while nsys writes its report: letting it finish (a second signal stops "
                     "nsys, which then deletes the report)")  # fmt: skip
        return True

    def capture() -> supervisor.Finished:
        return supervisor.run(argv, cleanup=cleanup, env=_env_for(opts, env), merge_stderr=True, hold=hold)

    done = capture()
    if _agent_lost(done, base):
        notes.append(f"nsys lost its agent before it wrote a report ({AGENT_LOST}): captured once more")
        done = capture()
    text = done.stdout
    notes += filter(None, [done.dropped_note()])
    if done.returncode < 0:
        notes.append(f"nsys was killed by signal {-done.returncode} part way")
    generated = _generated(text)

    def find(suffix: str) -> Path | None:
        listed = [p for p in generated if p.suffix == suffix and p.is_file()]
        if listed:
            return listed[0]
        return _existing(base.with_name(base.name + suffix)) if base is not None else None

    seen = [done.interrupted] if done.interrupted else []  # the run's signals: the import and export add
    rep, qdstrm, sqlite = find(".nsys-rep"), find(".qdstrm") or _left_qdstrm(text), find(".sqlite")
    stem = base or (rep or qdstrm or Path("report")).with_suffix("")
    if rep is None and qdstrm is not None:
        try:
            rep = import_qdstrm(qdstrm, stem.with_name(stem.name + ".nsys-rep"), info, seen)
            notes.append(f"nsys left only {qdstrm.name}: imported it with QdstrmImporter")
        except NsysError as e:
            notes.append(str(e))
    if opts.export_sqlite and rep is not None and sqlite is None:
        try:
            sqlite = export_sqlite(rep, rep.with_suffix(".sqlite"), info, seen)
            notes.append(f"exported {sqlite.name} with `nsys export`")
        except NsysError as e:
            notes.append(str(e))
    if base is not None and rep is not None and rep.parent != base.parent:
        notes.append(f"nsys could not write beside {base}: it wrote {rep} instead")
    held = bool(seen) and (done.interrupted is None or done.held)
    if seen:
        notes.insert(0, _interrupted_note(seen[0], held, rep or qdstrm))
    return ProfileResult(
        returncode=done.returncode,
        rep=rep,
        sqlite=sqlite,
        qdstrm=qdstrm if rep is None else None,
        stderr_tail=_tail(text),
        program_tail=_program_tail(text),
        command=argv,
        notes=notes,
        interrupted=seen[0] if seen else None,
        held=held,
        output=text,
        dropped=done.dropped,
    )


def _interrupted_note(sig: int, held: bool, kept: Path | None) -> str:
    """What the signal did: the report was let finish, or nsys stopped the program (and kept what)."""
    if held:
        return f"interrupted ({name(sig)}) while the report was written: it was let finish"
    if kept is None:
        return f"interrupted ({name(sig)}): nsys was stopped part way and wrote no report"
    return f"interrupted ({name(sig)}): nsys was stopped part way and kept what it had recorded"


# --- one report per rank (harness/execution/ranks/multirank.py) ---------------------------------------

RANK_PATTERN = "%q{RANK}"  # nsys expands it from each process's environment: torchrun sets RANK


def rank_profile_command(
    info: NsysInfo, opts: ProfileOptions, target: Sequence[str]
) -> tuple[list[str], dict[str, str], list[str]]:
    """`nsys profile` around one rank's command, for torchrun to start in place of the rank: each rank
    then writes `<output>.rank<R>.nsys-rep` (and .sqlite). The argv, the environment it needs, and the
    dropped flags."""
    if requested_output(opts.extra_args) is not None:
        raise NsysError("--nsys-arg --output does not go with --nproc: each rank's report is <run>.rank<R>")
    per_rank = ProfileOptions(**{**opts.__dict__, "output": Path(f"{opts.output}.rank{RANK_PATTERN}")})
    argv, dropped = build_profile_command(info, per_rank, target)
    return argv, _env_for(opts, None), dropped


def rank_report(
    info: NsysInfo, opts: ProfileOptions, rank: int
) -> tuple[Path | None, Path | None, list[str]]:
    """Rank `rank`'s .nsys-rep and .sqlite as nsys left them (a partial report of a stopped rank too),
    exporting the SQLite where nsys did not; and notes."""
    base = Path(f"{opts.output}.rank{rank}")
    rep = _existing(base.with_name(base.name + ".nsys-rep"))
    sqlite = _existing(base.with_name(base.name + ".sqlite"))
    notes: list[str] = []
    if rep is None:
        return None, sqlite, [f"rank {rank}: nsys wrote no report"]
    if opts.export_sqlite and sqlite is None:
        try:
            sqlite = export_sqlite(rep, rep.with_suffix(".sqlite"), info)
            notes.append(f"rank {rank}: exported {sqlite.name} with `nsys export`")
        except NsysError as e:
            notes.append(f"rank {rank}: {e}")
    return rep, sqlite, notes
