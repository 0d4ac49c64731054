"""nsys import and nsys export: a left-over .qdstrm into a report, a report into SQLite."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from harness.core.errors import NsysError
from harness.execution.nsys.find import NsysInfo, _version, candidates, find_nsys

TAIL_LINES = 20


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    # nsys draws progress bars with carriage returns: keep only the lines a person would see
    kept = [ln.rsplit("\r", 1)[-1] for ln in text.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not re.match(r"^\[\d/\d\] \[", ln)]
    return "\n".join(kept[-lines:])


def _program_tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last lines the program printed: its output, captured with nsys's, up to where nsys's closing
    lines begin ("Generating '…qdstrm'", "Generated:"), so a long import error of nsys's never hides them."""
    kept = text.splitlines()
    for i, line in enumerate(kept):
        seen = line.rsplit("\r", 1)[-1]
        if seen.startswith("Generating '") or seen.strip() == "Generated:":
            kept = kept[:i]
            break
    return _tail("\n".join(kept), lines)


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
