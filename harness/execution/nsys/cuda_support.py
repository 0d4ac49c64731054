"""Which CUDA each Nsight Systems release was made for, and what that means for a capture, decided before it
starts: a capture known to record nothing is refused (in one line, with what to install), one that may lose
part of the GPU work is warned about and left to the capture's health checks.

NVIDIA ships one nsys with each CUDA toolkit; a release traces the CUDA it shipped with and older ones,
through the CUPTI libraries in its target folder (`libcupti.so.X.Y`, one per CUDA it knows). How a newer
CUDA fares, measured on an H100 (driver 580.159.04, PyTorch 2.11.0+cu130, CUDA 13.0; docs/gpu.md):

- nsys 2022.4.2.1 (made for CUDA 11.8, two major versions behind): 3 CUDA API calls and 0 kernels, NVTX for
  the first 3 steps only. Nothing usable: refused.
- nsys 2023.4.4 with its own CUPTI 12.4 (one major version behind): the CUDA trace stops for about 0.8 s after
  cuBLAS loads (a short program loses everything after it), 66-72 % of GPU time is in kernels it cannot name,
  and CUDA graphs traced whole are lost. Partial: a warning, then `harness health` judges the capture.
- the same nsys with CUPTI 13.0 added to its target folder (`make setup` does it): 40,796 of 40,796 kernels,
  all named, every launch call with its kernel; CUDA graphs recorded per node. Traces CUDA 13.0.

A newer minor version of the same major CUDA is partial too (new API entry points are not traced). A CUPTI
counts only for nsys 2023.4 and newer (CUPTI_SINCE): the combination measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from harness.core.errors import NsysError

Release = tuple[int, int]

# (first nsys release, the CUDA it was made for, where that is written). Each row: the nsys that NVIDIA's
# CUDA toolkit of that version ships (its folder `nsight-systems-<release>` in the toolkit), or the
# release notes' "CUDA x.y support". A release between two rows was made for the CUDA of the row before.
MADE_FOR: tuple[tuple[Release, Release, str], ...] = (
    ((2022, 4), (11, 8), "CUDA 11.8 ships Nsight Systems 2022.4.2"),
    ((2023, 4), (12, 4), "CUDA 12.4 ships Nsight Systems 2023.4.4 (Debian: 2023.4.4.54~12.4.1)"),
    ((2024, 5), (12, 6), "CUDA 12.6 ships Nsight Systems 2024.5.1"),
    ((2024, 6), (12, 8), "CUDA 12.8 ships Nsight Systems 2024.6.2"),
    ((2025, 1), (12, 9), "CUDA 12.9 ships Nsight Systems 2025.1.3"),
    ((2025, 3), (13, 0), "CUDA 13.0 ships Nsight Systems 2025.3.2"),
    ((2025, 6), (13, 1), "Nsight Systems 2025.6 release notes: CUDA 13.1 support"),
)
GET = "https://developer.nvidia.com/nsight-systems (then HARNESS_NSYS=/path/to/nsys)"
CUPTI_SINCE: Release = (2023, 4)

Verdict = Literal["ok", "partial", "none"]


def _release(version: str | None) -> Release | None:
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(found[1]), int(found[2])) if found else None


def made_for(nsys_version: str) -> Release | None:
    """The CUDA the nsys release was made for: the newest row of MADE_FOR at or before it. A release older
    than the table is taken as 2022.4's (11.8 at most); one newer than the table's last release is taken to
    trace every minor version of that last CUDA major."""
    release = _release(nsys_version)
    if release is None:
        return None
    rows = [row for row in MADE_FOR if row[0] <= release]
    if not rows:
        return MADE_FOR[0][1]
    first, cuda, _ = rows[-1]
    if first == MADE_FOR[-1][0] and release > first:
        return (cuda[0], 99)
    return cuda


def made_for_with(nsys_version: str, cupti: str | None, cuda: str | None = None) -> Release | None:
    """The CUDA the nsys traces a CUDA `cuda` program with, given `cupti`, the newest CUPTI in its target
    folder: that CUPTI's version where it is newer than the release's, the release loads it (CUPTI_SINCE) and
    the CUDA is at least as new (nsys takes the CUPTI of the driver's version: a CUDA 12.8 program under
    2023.4 gets its 12.4 whatever else is there); else made_for."""
    made = made_for(nsys_version)
    release, extra, wanted = _release(nsys_version), _release(cupti), _release(cuda)
    if made is None or release is None or extra is None or release < CUPTI_SINCE or extra <= made:
        return made
    return extra if wanted is None or wanted >= extra else made


def first_for(cuda: Release) -> Release | None:
    """The first nsys release made for `cuda` (or a newer CUDA), None past the table."""
    return next((first for first, made, _ in MADE_FOR if made >= cuda), None)


@dataclass(frozen=True)
class Support:
    """What an nsys can be expected to record of one CUDA version, and the line that says so."""

    verdict: Verdict
    nsys: str
    cuda: str  # "13.0"
    whose: str  # "the program's" (torch.version.cuda) or "the driver's" (NVML)
    made: Release | None
    cupti: str | None = None  # the newest CUPTI in its target folder, where it extends the release's CUDA

    @property
    def line(self) -> str:
        if self.made is None:
            return f"nsys {self.nsys}: its CUDA is unknown; cannot tell whether it traces CUDA {self.cuda}"
        made = f"{self.made[0]}.{self.made[1]}" if self.made[1] != 99 else f"{self.made[0]}.x"
        said = f"nsys {self.nsys} was made for CUDA {made}"
        if self.cupti:
            said = f"nsys {self.nsys} with CUPTI {self.cupti} in its target folder traces CUDA {made}"
        if self.verdict == "ok":
            if self.cupti:
                cupti = f"with CUPTI {self.cupti} in its target folder"
                return f"nsys {self.nsys} {cupti} traces {self.whose} CUDA {self.cuda}"
            return f"{said}: traces {self.whose} CUDA {self.cuda}"
        wanted = _release(self.cuda)
        first = first_for(wanted) if wanted else None
        install = f"Nsight Systems {first[0]}.{first[1]} or newer" if first else "a newer Nsight Systems"
        if self.verdict == "none":
            return (
                f"{said} and records nothing of a CUDA {self.cuda} program (on an H100 with CUDA 13.0, nsys "
                f"2022.4 recorded 0 kernels); install {install}: {GET}"
            )
        cupti = ""
        if wanted and wanted[0] == 13 and not self.cupti and _release(self.nsys) == CUPTI_SINCE:
            cupti = "; `make setup` adds CUPTI 13.0 to the project's nsys 2023.4 (scripts/install-nsys.sh)"
        return (
            f"{said}; {self.whose} CUDA {self.cuda} is newer: kernels may be lost part way or left unnamed "
            f"(the capture's health says what was lost); {install} is made for it: {GET}{cupti}"
        )


def support(nsys_version: str, cuda: str, whose: str = "the program's", cupti: str | None = None) -> Support:
    """What nsys `nsys_version`, with `cupti` the newest CUPTI in its target folder, records of a CUDA `cuda`
    ("13.0") program: ok (made for it or newer), partial (a newer minor version, or one major version newer)
    or none (two or more major versions newer)."""
    made = made_for_with(nsys_version, cupti, cuda)
    extended = cupti if made != made_for(nsys_version) else None
    wanted = _release(cuda)
    if made is None or wanted is None:
        return Support("partial", nsys_version, cuda, whose, made, extended)
    if wanted <= made:
        verdict: Verdict = "ok"
    elif wanted[0] - made[0] >= 2:
        verdict = "none"
    else:
        verdict = "partial"
    return Support(verdict, nsys_version, cuda, whose, made, extended)


def assess(
    nsys_version: str, program_cuda: str | None, driver_cuda: str | None, cupti: str | None = None
) -> list[Support]:
    """The program's CUDA (torch.version.cuda) and the driver's (NVML), each against the nsys. Only the
    program's can refuse a capture: the H100 measurement is of a program built for CUDA 13; a driver newer
    than the program is what CUDA's compatibility promises, so it can only warn."""
    found = []
    if program_cuda:
        found.append(support(nsys_version, program_cuda, "the program's", cupti))
    if driver_cuda:
        driver = support(nsys_version, driver_cuda, "the driver's", cupti)
        found.append(driver if driver.verdict != "none" else replace(driver, verdict="partial"))
    return found


FORCE = "--nsys-force"


def check_capture(
    nsys_version: str,
    program_cuda: str | None,
    driver_cuda: str | None,
    *,
    force: bool = False,
    cupti: str | None = None,
) -> list[str]:
    """Before a capture: NsysError when the nsys is known to record nothing of the program's CUDA (unless
    `force`); otherwise the warning lines for what it may lose (none when it traces both)."""
    found = assess(nsys_version, program_cuda, driver_cuda, cupti)
    refused = [s for s in found if s.verdict == "none"]
    if refused and not force:
        raise NsysError(f"{refused[0].line}; {FORCE} captures anyway")
    return [f"{FORCE}: capturing anyway: {s.line}" if s.verdict == "none" else s.line
            for s in found if s.verdict != "ok"]  # fmt: skip
