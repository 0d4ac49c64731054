"""Machine load: read from the real /proc while a real process burns a CPU beside us."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from procs import wait_until

from harness.core.machine import MachineLoad, busy_note, combine, describe, load_since, snapshot

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_another_process_burning_a_cpu_is_seen_as_others() -> None:
    start = snapshot()
    assert start is not None
    # not waited for until after the measurement: its CPU time is not ours
    burner = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 60: pass"]
    )
    try:
        # however busy the machine: until the burner has had half a second of CPU, not a wall time
        wait_until(lambda: _cpu_seconds(burner.pid) >= 0.5, 120, "the burner to use 0.5 s of CPU")
        load = load_since(start)
    finally:
        burner.kill()
        burner.wait()
    assert load is not None and load.seconds > 0
    assert load.others_share is not None and load.own_share is not None
    others_s, own_s = (share * load.seconds * load.cpus for share in (load.others_share, load.own_share))
    # the burner's CPU time is others', not ours (how large a share of the machine that is depends on its
    # number of CPUs and on who else is working: busy_reasons are tested on given figures below)
    assert others_s >= 0.45 and own_s < 0.45


def test_our_own_waited_children_are_not_others() -> None:
    start = snapshot()
    # half a second of CPU time (not wall time: the machine may be shared)
    burn = "import time\nwhile time.process_time() < 0.5: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    load = load_since(start)
    assert load is not None and load.own_share is not None
    assert load.own_share * load.seconds * load.cpus >= 0.45  # the child's CPU time counted as ours


def test_profiled_intervals_keep_load_averages_only() -> None:
    load = load_since(snapshot(), others=False)
    assert load is not None and load.others_share is None and load.own_share is None
    assert "other processes" not in describe(load)
    assert MachineLoad.from_dict(load.to_dict()) == load


def test_busy_reasons_and_combine() -> None:
    quiet = MachineLoad(
        cpus=4, seconds=10, load_before=0.5, load_after=1.0, others_share=0.02, own_share=0.25
    )
    busy = MachineLoad(cpus=4, seconds=30, load_before=3.0, load_after=3.5, others_share=0.3, own_share=0.25)
    assert quiet.busy_reasons() == [] and busy_note(quiet, "x") is None
    assert busy.busy_reasons() == [
        "load average 3.00 before on 4 CPUs",
        "other processes took 30% of the CPU time",
    ]
    assert busy.busy_reasons(load_counts=False) == ["other processes took 30% of the CPU time"]
    both = combine([quiet, busy])
    assert both is not None
    assert (both.load_before, both.load_after, both.seconds) == (0.5, 3.5, 40)
    assert both.others_share == pytest.approx((0.02 * 10 + 0.3 * 30) / 40)  # weighted by time
    assert describe(both) == (
        "load average 0.50 before, 3.50 after on 4 CPUs; other processes took 23% of the CPU time"
    )
    assert combine([]) is None
