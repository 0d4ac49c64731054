"""Finding nsys: the binary (HARNESS_NSYS, PATH, the project-local copy, install places), its version and
the flags its `nsys profile` knows."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import NsysError

REPO = Path(__file__).resolve().parents[3]
PROJECT_LOCAL = REPO / ".tools" / "nsys" / "usr" / "lib" / "nsight-systems" / "bin" / "nsys"
INSTALL_PLACES = ("/usr/local/cuda/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys")
TARGET = "target-linux-x64"  # the folder of what nsys runs beside the program
INJECTION = "libToolsInjection64.so"  # what nsys injects into the program it profiles, in TARGET
PROBE_TIMEOUT_S = 60  # for each of `nsys --version` and `nsys profile --help`
HOW_TO_GET = (
    "install Nsight Systems: `make setup` (Debian/Ubuntu: project-local copy via scripts/install-nsys.sh) or "
    "https://developer.nvidia.com/nsight-systems, then put nsys on PATH or set HARNESS_NSYS"
)


@dataclass(frozen=True)
class NsysInfo:
    path: Path
    version: str  # "2022.4.2.1"
    flags: frozenset[str]  # long options of `nsys profile`, without dashes
    source: str  # how it was found
    cuptis: tuple[str, ...] = ()  # the CUPTI versions in its target folder, oldest first ("12.4", "13.0")

    def supports(self, flag: str) -> bool:
        return flag.lstrip("-").split("=", 1)[0] in self.flags

    @property
    def newest_cupti(self) -> str | None:
        return self.cuptis[-1] if self.cuptis else None


def target_folders(path: Path) -> tuple[Path, ...]:
    """Where the nsys at `path` keeps what it injects into a program: beside its real binary, or
    target-linux-x64 beside its bin/ (NVIDIA's layout)."""
    real = Path(os.path.realpath(path))
    return tuple(dict.fromkeys((real.parent, path.parent.parent / TARGET)))


def missing_injection(path: Path) -> Path | None:
    """The target folder of the nsys at `path` where it lacks its injection library (a half-copied
    installation): such an nsys runs the program and records nothing of it, silently (2023.4 exported an
    empty report). None where the library is there, or where no target folder is found to tell (a wrapper
    script that names the real nsys only inside it)."""
    folders = [f for f in target_folders(path) if f.name == TARGET and f.is_dir()]
    if not folders or any((folder / INJECTION).is_file() for folder in folders):
        return None
    return folders[0]


def cupti_versions(path: Path) -> tuple[str, ...]:
    """The CUPTI libraries beside the nsys at `path` (`target-linux-x64/libcupti.so.X.Y`), oldest first: nsys
    traces CUDA through the newest one the driver allows, so a CUPTI added there extends what it traces."""
    found: set[tuple[int, int]] = set()
    for folder in target_folders(path):
        for lib in glob.glob(str(folder / "libcupti.so.*")):
            version = re.fullmatch(r"libcupti\.so\.(\d+)\.(\d+)", Path(lib).name)
            if version:
                found.add((int(version[1]), int(version[2])))
    return tuple(f"{major}.{minor}" for major, minor in sorted(found))


def _version(path: Path) -> str:
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NsysError(f"{path} does not run ({e}); {HOW_TO_GET}") from None
    found = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out.stdout + out.stderr)
    if out.returncode != 0:
        # its error is stderr's last line; a program that is not nsys (`false`) names itself on stdout's first
        said = out.stderr.strip().splitlines()[-1:] or out.stdout.strip().splitlines()[:1]
        raise NsysError(
            f"{path} is not a working nsys: {path} --version failed (exit {out.returncode}): "
            f"{said[0] if said else 'it printed nothing'}; {HOW_TO_GET}"
        )
    if not found:  # it ran and said something else: another program (`true`, a wrapper script)
        head = (out.stdout or out.stderr).strip().splitlines()[:1] or ["nothing"]
        raise NsysError(
            f"{path} is not nsys: its --version printed no Nsight Systems version ({head[0]!r}); {HOW_TO_GET}"
        )
    return found.group(1)


def _profile_flags(path: Path) -> frozenset[str]:
    try:
        out = subprocess.run(
            [str(path), "profile", "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:  # it answered --version, then hung or went away
        raise NsysError(
            f"{path} is not a working nsys: `{path} profile --help` did not finish ({e}); {HOW_TO_GET}"
        ) from None
    flags = set(re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", out.stdout, flags=re.MULTILINE))
    # `--nvtx-domain-[include|exclude]=` is printed as one entry
    if "nvtx-domain-" in out.stdout:
        flags |= {"nvtx-domain-include", "nvtx-domain-exclude"}
    return frozenset(flags)


@functools.cache
def probe(path: Path, source: str = "given") -> NsysInfo:
    """Version and supported `nsys profile` flags of the nsys at `path`."""
    path = Path(path)
    return NsysInfo(
        path=path,
        version=_version(path),
        flags=_profile_flags(path),
        source=source,
        cuptis=cupti_versions(path),
    )


@functools.cache
def installed_version() -> str | None:
    """The version of the nsys the harness would use (HARNESS_NSYS, PATH, …, .tools/nsys); None when there
    is none, or it does not run. Never raises: a table command works without nsys. The tables print in its
    `nsys stats` format (analysis.tables.stats_format.chosen); only the commands whose tables differ between
    formats ask (`nsys --version`, about 0.1 s)."""
    for path, _ in candidates():
        p = Path(path)
        if p.is_file() and os.access(p, os.X_OK):
            try:
                return _version(p)
            except NsysError:
                return None
    return None


def candidates(explicit: str | None = None) -> list[tuple[str, str]]:
    """(path, how it was found) in the order they are tried."""
    found: list[tuple[str, str]] = []
    # a `~/…` quoted in the shell reaches here unexpanded: expanded, as HARNESS_DB's is
    if explicit:
        found.append((os.path.expanduser(explicit), "--nsys-path"))
    if os.environ.get("HARNESS_NSYS"):
        found.append((os.path.expanduser(os.environ["HARNESS_NSYS"]), "HARNESS_NSYS"))
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
            # quoted where spaces at an end or a line end (`export HARNESS_NSYS="$(…)\n"`) would not show
            shown = path if path.isprintable() and path == path.strip() else repr(path)
            raise NsysError(f"nsys given by {source} is not an executable file: {shown}; {HOW_TO_GET}")
        if usable:
            return probe(Path(os.path.abspath(p)), source)
    raise NsysError(f"nsys not found; {HOW_TO_GET}")
