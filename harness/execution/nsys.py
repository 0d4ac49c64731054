"""Everything that runs the `nsys` binary: finding it, reading its flags, profiling, importing, exporting.

No other module shells out to nsys. Flags a given nsys does not know are dropped from the command and named,
so one harness works with the Debian 2022.4 build (no --python-backtrace) and with current releases.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analysis.names import MEASURED as MEASURED_RANGE  # around the measured steps (nvtx_ranges opens it)
from harness.core.errors import NsysError

REPO = Path(__file__).resolve().parent.parent
PROJECT_LOCAL = REPO / ".tools" / "nsys" / "usr" / "lib" / "nsight-systems" / "bin" / "nsys"
INSTALL_PLACES = ("/usr/local/cuda/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys")
HOW_TO_GET = (
    "install Nsight Systems: `make setup` (Debian/Ubuntu: project-local copy via scripts/install-nsys.sh) or "
    "https://developer.nvidia.com/nsight-systems, then put nsys on PATH or set HARNESS_NSYS"
)
DEFAULT_TRACE = ("cuda", "osrt", "nvtx")

LIGHT_ARGS = ("--sample=none", "--cpuctxsw=none")
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
TAIL_LINES = 20


@dataclass(frozen=True)
class NsysInfo:
    path: Path
    version: str  # "2022.4.2.1"
    flags: frozenset[str]  # long options of `nsys profile`, without dashes
    source: str  # how it was found

    def supports(self, flag: str) -> bool:
        return flag.lstrip("-").split("=", 1)[0] in self.flags


def _version(path: Path) -> str:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NsysError(f"{path} does not run ({e}); {HOW_TO_GET}") from None
    found = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out.stdout + out.stderr)
    if out.returncode != 0 or not found:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NsysError(f"{path} --version failed: {tail[0]}; {HOW_TO_GET}")
    return found.group(1)


def _profile_flags(path: Path) -> frozenset[str]:
    out = subprocess.run([str(path), "profile", "--help"], capture_output=True, text=True, timeout=60)
    flags = set(re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", out.stdout, flags=re.MULTILINE))
    # `--nvtx-domain-[include|exclude]=` is printed as one entry
    if "nvtx-domain-" in out.stdout:
        flags |= {"nvtx-domain-include", "nvtx-domain-exclude"}
    return frozenset(flags)


@functools.cache
def probe(path: Path, source: str = "given") -> NsysInfo:
    """Version and supported `nsys profile` flags of the nsys at `path`."""
    path = Path(path)
    return NsysInfo(path=path, version=_version(path), flags=_profile_flags(path), source=source)


def candidates(explicit: str | None = None) -> list[tuple[str, str]]:
    """(path, how it was found) in the order they are tried."""
    found: list[tuple[str, str]] = []
    if explicit:
        found.append((explicit, "--nsys-path"))
    if os.environ.get("HARNESS_NSYS"):
        found.append((os.environ["HARNESS_NSYS"], "HARNESS_NSYS"))
    if on_path := shutil.which("nsys"):
        found.append((on_path, "PATH"))
    for pattern in INSTALL_PLACES:
        found += [(p, "install place") for p in sorted(glob.glob(pattern), reverse=True)]
    found.append((str(PROJECT_LOCAL), "the project-local copy in .tools/nsys"))
    return found


def find_nsys(explicit: str | None = None) -> NsysInfo:
    """The nsys to use: --nsys-path, HARNESS_NSYS, PATH, usual install places, the project-local copy.

    A path the user named that is not an executable is an error, not skipped silently.
    """
    for path, source in candidates(explicit):
        p = Path(path)
        usable = p.is_file() and os.access(p, os.X_OK)
        if source in ("--nsys-path", "HARNESS_NSYS") and not usable:
            raise NsysError(f"nsys given by {source} is not an executable file: {path}; {HOW_TO_GET}")
        if usable:
            return probe(Path(os.path.abspath(p)), source)
    raise NsysError(f"nsys not found; {HOW_TO_GET}")


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


def build_profile_command(
    info: NsysInfo, opts: ProfileOptions, target: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The `nsys profile` argv and the requested flags this nsys does not support (dropped).

    `extra_args` come last and replace any default flag of the same name.
    """
    defaults = [f"--trace={','.join(opts.trace)}"]
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
    defaults += [f"--output={opts.output}", "--force-overwrite=true"]
    if opts.export_sqlite:
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


@dataclass
class ProfileResult:
    returncode: int  # the profiled program's exit code as nsys reports it; negative: killed by a signal
    rep: Path | None
    sqlite: Path | None
    qdstrm: Path | None
    stderr_tail: str
    command: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: int | None = None  # the signal passed on to nsys (SIGINT: Ctrl-C), if any
    artifacts: dict[str, str] = field(default_factory=dict)  # more files to store: one report per rank


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    # nsys draws progress bars with carriage returns: keep only the lines a person would see
    kept = [ln.rsplit("\r", 1)[-1] for ln in text.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not re.match(r"^\[\d/\d\] \[", ln)]
    return "\n".join(kept[-lines:])


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


def profile(
    info: NsysInfo,
    opts: ProfileOptions,
    target: Sequence[str],
    env: dict[str, str] | None = None,
    cleanup: Sequence[Path] = (),
) -> ProfileResult:
    """Run `target` under `nsys profile`; import a left-over .qdstrm and export SQLite where nsys did not.

    nsys runs under harness.execution.supervisor: it and everything it starts end with the harness, and
    `cleanup`
    folders go with them. Ctrl-C and SIGTERM are passed on to nsys, which stops collection, passes the signal
    to the program and writes what was recorded. A report name given with --nsys-arg=--output is followed.
    """
    from harness.core.signals import name
    from harness.execution import supervisor

    argv, _ = build_profile_command(info, opts, target)
    base = report_base(opts)
    if base is not None:
        try:
            base.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise NsysError(f"cannot create the report's folder {base.parent}: {e.strerror}") from None
    notes: list[str] = []
    done = supervisor.run(argv, cleanup=cleanup, env=_env_for(opts, env), merge_stderr=True)
    text = done.stdout
    if done.interrupted:
        notes.append(
            f"interrupted ({name(done.interrupted)}): nsys was stopped part way and kept what it had recorded"
        )
    if done.returncode < 0:
        notes.append(f"nsys was killed by signal {-done.returncode} part way")
    generated = _generated(text)

    def find(suffix: str) -> Path | None:
        listed = [p for p in generated if p.suffix == suffix and p.is_file()]
        if listed:
            return listed[0]
        return _existing(base.with_name(base.name + suffix)) if base is not None else None

    rep, qdstrm, sqlite = find(".nsys-rep"), find(".qdstrm") or _left_qdstrm(text), find(".sqlite")
    stem = base or (rep or qdstrm or Path("report")).with_suffix("")
    if rep is None and qdstrm is not None:
        try:
            rep = import_qdstrm(qdstrm, stem.with_name(stem.name + ".nsys-rep"), info)
            notes.append(f"nsys left only {qdstrm.name}: imported it with QdstrmImporter")
        except NsysError as e:
            notes.append(str(e))
    if opts.export_sqlite and rep is not None and sqlite is None:
        try:
            sqlite = export_sqlite(rep, rep.with_suffix(".sqlite"), info)
            notes.append(f"exported {sqlite.name} with `nsys export`")
        except NsysError as e:
            notes.append(str(e))
    if base is not None and rep is not None and rep.parent != base.parent:
        notes.append(f"nsys could not write beside {base}: it wrote {rep} instead")
    return ProfileResult(
        returncode=done.returncode,
        rep=rep,
        sqlite=sqlite,
        qdstrm=qdstrm if rep is None else None,
        stderr_tail=_tail(text),
        command=argv,
        notes=notes,
        interrupted=done.interrupted,
    )


def _existing(path: Path) -> Path | None:
    return path if path.is_file() else None


def _left_qdstrm(nsys_output: str) -> Path | None:
    """A .qdstrm nsys named in its output ("Generating '/tmp/nsys-report-ab12.qdstrm'") and did not import."""
    for name in reversed(re.findall(r"'([^']+\.qdstrm)'", nsys_output)):
        if Path(name).is_file():
            return Path(name)
    return None


def find_importer(info: NsysInfo) -> Path:
    """QdstrmImporter of this nsys installation (host-linux-x64/ beside or above the nsys binary)."""
    real = info.path.resolve()
    # its own installation first, then any other nsys this machine has (same-version importers only)
    others = [Path(p).resolve() for p, _ in candidates() if Path(p).is_file()]
    for nsys_bin in [real, *[o for o in others if o != real]]:
        for parent in list(nsys_bin.parents)[:4]:
            for cand in (parent / "host-linux-x64" / "QdstrmImporter", parent / "QdstrmImporter"):
                if cand.is_file() and os.access(cand, os.X_OK) and _same_version(nsys_bin, info):
                    return cand
    raise NsysError(
        f"QdstrmImporter not found near {real}: the nsys installation is incomplete "
        "(scripts/install-nsys.sh links host-linux-x64 into place)"
    )


def _same_version(nsys_bin: Path, info: NsysInfo) -> bool:
    if nsys_bin == info.path.resolve():
        return True
    try:
        return _version(nsys_bin) == info.version
    except NsysError:
        return False


def import_qdstrm(qdstrm: Path, rep: Path | None = None, info: NsysInfo | None = None) -> Path:
    """Turn a .qdstrm (raw stream nsys writes during capture) into a .nsys-rep with QdstrmImporter."""
    info = info or find_nsys()
    importer = find_importer(info)
    rep = rep or qdstrm.with_suffix(".nsys-rep")
    proc = subprocess.run(
        [str(importer), "--input-file", str(qdstrm), "--output-file", str(rep), "--force-overwrite"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not rep.is_file():
        raise NsysError(f"QdstrmImporter could not import {qdstrm}: {_tail(proc.stdout + proc.stderr, 1)}")
    return rep


def export_sqlite(rep: Path, out: Path | None = None, info: NsysInfo | None = None) -> Path:
    """`nsys export --type=sqlite` of a .nsys-rep; the report itself is only read."""
    info = info or find_nsys()
    out = out or rep.with_suffix(".sqlite")
    proc = subprocess.run(
        [
            str(info.path),
            "export",
            "--type=sqlite",
            f"--output={out}",
            "--force-overwrite=true",
            str(rep),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not out.is_file():
        raise NsysError(f"nsys export could not export {rep}: {_tail(proc.stdout + proc.stderr, 1)}")
    return out


# --- one report per rank (harness/execution/ranks/multirank.py)
# ----------------------------------------------------------

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
