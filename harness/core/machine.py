"""How busy the machine was while we measured: load average and the CPU time other processes took.

Read from /proc (Linux). Elsewhere every function returns None and nothing is recorded.

Other processes' share = (CPU time the whole machine spent busy, from /proc/stat) − (CPU time of this process
and of the children it waited for, from os.times()), divided by the CPU time the machine had (wall time ×
CPUs). Children that are not reaped by the process that started them count as others: under nsys the
profiled program and nsys's daemons are such, so for a profiled run only the load averages are recorded
(`others=False`), and how busy the machine was is judged from the runs without a profiler.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

PROC = Path("/proc")
BUSY_LOAD = 0.5  # 1-minute load average per CPU before we start that means someone else is working
BUSY_SHARE = 0.10  # share of all CPUs' time taken by other processes
BASELINE_RUN = "the baseline run"  # whose load a reason is, when not the run's own (busy_of)


@dataclass(frozen=True)
class Snapshot:
    wall_s: float
    busy_s: float  # all CPUs' non-idle time since boot
    own_s: float  # this process and its reaped children
    load: float  # 1-minute load average


@dataclass(frozen=True)
class MachineLoad:
    cpus: int
    seconds: float
    load_before: float  # 1-minute load averages
    load_after: float
    others_share: float | None  # of all CPUs' time in the interval, 0..1; None: not measurable
    own_share: float | None

    def busy_reasons(self, *, load_counts: bool = True) -> list[str]:
        """Why the figures measured in this interval may be unreliable; empty when the machine was quiet.

        `load_counts`: judge the load average before too (not for a run that follows our own runs).
        """
        reasons = []
        if load_counts and self.load_before > BUSY_LOAD * self.cpus:
            reasons.append(f"load average {self.load_before:.2f} before on {self.cpus} CPUs")
        if self.others_share is not None and self.others_share > BUSY_SHARE:
            reasons.append(f"other processes took {self.others_share:.0%} of the CPU time")
        return reasons

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MachineLoad:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def _cpu_busy_s() -> float:
    """Non-idle time of all CPUs since boot: user nice system (idle iowait) irq softirq steal."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def snapshot() -> Snapshot | None:
    try:
        busy = _cpu_busy_s()
        load = float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return Snapshot(time.monotonic(), busy, own, load)


def load_since(start: Snapshot | None, *, others: bool = True) -> MachineLoad | None:
    """The machine's load from `start` to now; `others=False` leaves the CPU shares out (see above)."""
    end = snapshot()
    if start is None or end is None:
        return None
    cpus = os.cpu_count() or 1
    seconds = end.wall_s - start.wall_s
    capacity = max(seconds * cpus, 1e-9)
    own = end.own_s - start.own_s
    others_s = max(0.0, (end.busy_s - start.busy_s) - own)
    return MachineLoad(
        cpus=cpus,
        seconds=seconds,
        load_before=start.load,
        load_after=end.load,
        others_share=min(1.0, others_s / capacity) if others else None,
        own_share=min(1.0, own / capacity) if others else None,
    )


def keep_load(extra: dict[str, Any], start: Snapshot | None, *, others: bool = True) -> MachineLoad | None:
    """The machine's load from `start` to now (`load_since`), kept in a run's `extra["machine"]`."""
    load = load_since(start, others=others)
    if load:
        extra["machine"] = load.to_dict()
    return load


def combine(loads: list[MachineLoad]) -> MachineLoad | None:
    """One figure for several intervals: load before the first and after the last, CPU shares pooled."""
    if not loads:
        return None
    measured = [x for x in loads if x.others_share is not None and x.own_share is not None]
    capacity = sum(x.seconds * x.cpus for x in measured)

    def pooled(share: str) -> float | None:
        if not measured or capacity <= 0:
            return None
        return sum(getattr(x, share) * x.seconds * x.cpus for x in measured) / capacity

    return MachineLoad(
        cpus=loads[0].cpus,
        seconds=sum(x.seconds for x in loads),
        load_before=loads[0].load_before,
        load_after=loads[-1].load_after,
        others_share=pooled("others_share"),
        own_share=pooled("own_share"),
    )


def over_runs(loads: list[dict[str, Any] | None]) -> MachineLoad | None:
    """Several runs' load measures (MachineLoad.to_dict's; None: not measured) as one: the load average
    before the first and after the last, the CPU shares of the runs that have them (not those under nsys,
    whose processes make the shares meaningless)."""
    found = [MachineLoad.from_dict(data) for data in loads if data]
    overall = combine([x for x in found if x.others_share is not None])
    if overall is None or not found:
        return overall
    return replace(overall, load_before=found[0].load_before, load_after=found[-1].load_after)


def busy_note(load: MachineLoad | None, what: str, *, load_counts: bool = True) -> str | None:
    """A warning line when the machine was busy during `what`, else None."""
    reasons = load.busy_reasons(load_counts=load_counts) if load else []
    if not reasons:
        return None
    return f"the machine was busy during {what} ({'; '.join(reasons)}): timings are noisier than usual"


def busy_of(loads: list[tuple[dict[str, Any], bool, str]]) -> list[str] | None:
    """Why the machine was busy over a run's load measures (MachineLoad.to_dict's), each with whether its
    load average counts (the one before a run that follows our own baseline run is ours) and whose it is
    ("": the run's own; else a name, e.g. "the baseline run", said with each of its reasons); None when
    none was recorded."""
    if not loads:
        return None
    return [
        f"{why} ({whose})" if whose else why
        for data, counts, whose in loads
        for why in MachineLoad.from_dict(data).busy_reasons(load_counts=counts)
    ]


def describe(load: MachineLoad) -> str:
    """`load average 0.80 before, 1.50 after on 2 CPUs; other processes took 12% of the CPU time`."""
    text = f"load average {load.load_before:.2f} before, {load.load_after:.2f} after on {load.cpus} CPUs"
    if load.others_share is not None:
        text += f"; other processes took {load.others_share:.0%} of the CPU time"
    return text
