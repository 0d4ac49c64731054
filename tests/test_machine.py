"""Machine load: read from the real /proc while a real process burns a CPU beside us."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.machine import MachineLoad, busy_note, combine, describe, load_since, snapshot

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")


def test_another_process_burning_a_cpu_is_seen_as_others() -> None:
    start = snapshot()
    assert start is not None
    # not waited for until after the measurement: its CPU time is not ours
    burner = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"]
    )
    try:
        time.sleep(1.5)
        load = load_since(start)
    finally:
        burner.kill()
        burner.wait()
    assert load is not None and load.seconds == pytest.approx(1.5, abs=0.5)
    # one busy CPU of `cpus`, less its start-up: a clear share of the machine
    assert load.others_share is not None and load.others_share > 0.5 / load.cpus
    assert load.own_share is not None and load.own_share < 0.2
    assert any("other processes took" in r for r in load.busy_reasons())
    note = busy_note(load, "the test")
    assert note is not None and note.startswith("the machine was busy during the test (")


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
