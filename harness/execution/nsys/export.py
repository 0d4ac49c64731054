"""nsys import and nsys export: a left-over .qdstrm into a report, a report into SQLite. Each runs under the
supervisor (harness.execution.supervisor), as every nsys does."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from harness.core import signals
from harness.core.errors import NsysError
from harness.execution import supervisor
from harness.execution.nsys.find import NsysInfo, _version, candidates, find_nsys

TAIL_LINES = 20
TAIL_CHARS = 1000  # of a line shown: its end (the whole line is in the run's log)


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    # nsys draws progress bars with carriage returns: keep only the lines a person would see
    kept = [ln.rsplit("\r", 1)[-1] for ln in text.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not re.match(r"^\[\d/\d\] \[", ln)]
    return "\n".join(ln if len(ln) <= TAIL_CHARS else "…" + ln[-TAIL_CHARS:] for ln in kept[-lines:])


def _closing(lines: Sequence[str]) -> int | None:
    """Where nsys's closing lines begin ("Generating '…qdstrm'", "Generated:"): the program has ended and nsys
    writes its report."""
    for i, line in enumerate(lines):
        seen = line.rsplit("\r", 1)[-1]
        if seen.startswith("Generating '") or seen.strip() == "Generated:":
            return i
    return None


IMPORTER = "QdstrmImporter"
LAUNCHER = "nsys-launcher"  # the profiled program's parent, started by nsys


def writing_report(nsys_output: str, processes: Sequence[tuple[str, str]]) -> bool:
    """Whether the program has ended and nsys is on its way to its report: its launcher has exited (a zombie
    nsys reaps at its own end), its importer runs, or it has said so ("Generating '…qdstrm'", which reached
    its output a second or more after the importer had started). `processes`: (name, state) of those under
    nsys's supervisor, its agent's among them.

    Told to stop then, nsys 2023.4 stops its importer and deletes the .qdstrm and the half-written report:
    nothing of a program that ran to its end is kept."""
    for name, state in processes:
        if (name == LAUNCHER and state == "Z") or (name == IMPORTER and state != "Z"):
            return True
    return _closing(nsys_output.splitlines()) is not None


def _program_tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last lines the program printed: its output, captured with nsys's, up to where nsys's closing
    lines begin, so a long import error of nsys's never hides them."""
    kept = text.splitlines()
    end = _closing(kept)
    return _tail("\n".join(kept[:end]), lines)


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
            for cand in (parent / "host-linux-x64" / IMPORTER, parent / IMPORTER):
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


def _tool(argv: list[str], out: Path, what: str, seen: list[int] | None) -> supervisor.Finished:
    """One of nsys's tools writing `out`, under the supervisor.

    `seen`: the signals of the run it belongs to, added to here. While none came, the first is held: the
    tool is let finish, as nsys is while it writes its report. After one came, a signal stops the tool: its
    half-written `out` is removed, an NsysError. Without `seen` (a command that only reads a report) a
    signal stops the tool, and is raised again once `out` is removed (KeyboardInterrupt, Terminated)."""
    done = supervisor.run(argv, merge_stderr=True, hold=(lambda *_: True) if seen == [] else None)
    if done.interrupted is None:
        return done
    if seen is None:
        out.unlink(missing_ok=True)
        raise signals.raised(done.interrupted)
    seen.append(done.interrupted)
    if not done.held:
        out.unlink(missing_ok=True)
        raise NsysError(f"{what} was stopped by {signals.name(done.interrupted)}: {out.name} not written")
    return done


def import_qdstrm(
    qdstrm: Path, rep: Path | None = None, info: NsysInfo | None = None, seen: list[int] | None = None
) -> Path:
    """Turn a .qdstrm (raw stream nsys writes during capture) into a .nsys-rep with QdstrmImporter; the
    .qdstrm is kept. `seen`: the signals of the run so far, see `_tool`."""
    info = info or find_nsys()
    importer = find_importer(info)
    rep = rep or qdstrm.with_suffix(".nsys-rep")
    argv = [str(importer), "--input-file", str(qdstrm), "--output-file", str(rep), "--force-overwrite"]
    done = _tool(argv, rep, f"QdstrmImporter importing {qdstrm}", seen)
    if done.returncode != 0 or not rep.is_file():
        raise NsysError(f"QdstrmImporter could not import {qdstrm}: {_tail(done.stdout, 1)}")
    return rep


def export_sqlite(
    rep: Path, out: Path | None = None, info: NsysInfo | None = None, seen: list[int] | None = None
) -> Path:
    """`nsys export --type=sqlite` of a .nsys-rep; the report itself is only read. `seen`: the signals of the
    run so far, see `_tool`."""
    info = info or find_nsys()
    out = out or rep.with_suffix(".sqlite")
    argv = [str(info.path), "export", "--type=sqlite", f"--output={out}", "--force-overwrite=true", str(rep)]
    done = _tool(argv, out, f"nsys export of {rep}", seen)
    if done.returncode != 0 or not out.is_file():
        raise NsysError(f"nsys export could not export {rep}: {_tail(done.stdout, 1)}")
    return out


def export_report(report: Path, target: Path) -> Path:
    """The exporter analysis takes (analysis.trace.exports: where the export goes, once): `report`'s SQLite
    export written at `target` by the nsys the harness finds, its error naming the report. A report this
    user may not read is said so here: nsys's own words for it name a boost error."""
    try:
        with open(report, "rb"):
            pass
    except OSError as e:
        raise NsysError(f"cannot read {report}: {e.strerror or type(e).__name__}") from None
    try:
        return export_sqlite(report, target)
    except NsysError as e:
        raise NsysError(f"cannot export {report} to SQLite: {e}") from None
