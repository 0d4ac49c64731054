"""harness.energy.power: finding NVML and RAPL (and saying why not), sampling them, the samples frame."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pynvml
import pytest
import torch
from power_data import (
    BURST_JOULES,
    H100_BURST,
    ManualClock,
    ReplayNvml,
    rapl_tree,
    set_energy,
)
from procs import wait_until

from analysis.runs.energy import energy_table, integrate
from harness.energy.power import PowerSampler, discover, gpus_in_use

MS = 1_000_000


class NoLibraryNvml(ReplayNvml):
    def nvmlInit(self) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


class LosesGpuNvml(ReplayNvml):
    """Answers the discovery probe, then every power read fails as a fallen-off GPU does."""

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if self.calls.count("nvmlDeviceGetPowerUsage") >= 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return super().nvmlDeviceGetPowerUsage(handle)


def replay(clock: ManualClock, sampler: PowerSampler, rows: list[tuple[int, ...]], start: int) -> None:
    """Sample once at each recorded time."""
    for row in rows:
        clock.now_ns = start + row[0] * MS
        sampler.sample()


# --- absence: each missing source named once, with the reason -------------------------------------------


def test_missing_nvml_library_is_named_with_the_reason(tmp_path: Path) -> None:
    sources = discover(nvml=NoLibraryNvml([H100_BURST]), powercap=tmp_path / "absent")
    assert sources.missing == [
        "NVML: NVML Shared Library Not Found",
        f"RAPL: {tmp_path / 'absent'} not present",
    ]
    assert not sources.any and sources.gpus == [] and sources.nvml is None


def test_the_real_nvml_here_either_opens_or_says_why() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:  # this machine: no NVIDIA driver
        sources = discover(powercap=Path("/nonexistent-powercap"))
        assert sources.missing[0] == f"NVML: {e}"
        assert sources.gpus == []
        return
    pynvml.nvmlShutdown()
    with discover(powercap=Path("/nonexistent-powercap")) as sources:
        assert sources.gpus and not any(m.startswith("NVML") for m in sources.missing)


def test_a_cpu_run_does_not_ask_nvml(tmp_path: Path) -> None:
    nvml = ReplayNvml([H100_BURST])
    sources = discover([], nvml=nvml, powercap=tmp_path / "absent")
    assert nvml.started_ns is None
    assert sources.missing == [f"RAPL: {tmp_path / 'absent'} not present"]


def test_rapl_zone_without_readable_energy_is_named(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 10, 1000)})
    (root / "intel-rapl:0" / "energy_uj").unlink()
    (root / "intel-rapl:0" / "energy_uj").symlink_to(root / "gone")
    sources = discover([], powercap=root)
    assert sources.rapl == []
    assert sources.missing == [
        f"RAPL: {root / 'intel-rapl:0' / 'energy_uj'} not readable (No such file or directory)"
    ]


def _discover_as_unprivileged(root: Path) -> list[str]:
    """discover([]) on `root` as a user who may not read root-only files: this user, or, when the tests run
    as root, a forked child that has dropped to nobody (65534)."""
    if os.geteuid() != 0:
        return discover([], powercap=root).missing
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, discover, report, leave without running pytest's cleanup
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(discover([], powercap=root).missing).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return json.loads(out)


def test_root_only_rapl_counter_says_how_to_fix_it() -> None:
    # Linux 5.10+ makes energy_uj readable by root alone; the message must say that and what to do.
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        root = rapl_tree(Path(tmp) / "powercap", {"intel-rapl:0": ("package-0", 10, 1000)})
        (root / "intel-rapl:0" / "energy_uj").chmod(0o000)
        missing = _discover_as_unprivileged(root)
    assert missing == [
        f"RAPL: {root / 'intel-rapl:0' / 'energy_uj'} not readable (Permission denied); root only since "
        "Linux 5.10: run as root or `sudo chmod a+r` the energy_uj files"
    ]


def test_powercap_without_rapl_zones(tmp_path: Path) -> None:
    (tmp_path / "powercap" / "dtpm").mkdir(parents=True)
    assert discover([], powercap=tmp_path / "powercap").missing == [
        f"RAPL: no intel-rapl zones in {tmp_path / 'powercap'}"
    ]


def test_gpu_without_energy_counter_integrates_power_and_says_so(tmp_path: Path) -> None:
    nvml = ReplayNvml([H100_BURST], unsupported={"nvmlDeviceGetTotalEnergyConsumption"})
    with discover(nvml=nvml, powercap=tmp_path) as sources:
        assert sources.notes == [
            "NVML: gpu0 (NVIDIA H100 80GB HBM3 #0) has no total-energy counter (Not Supported); "
            "energy is integrated from power"
        ]
        assert sources.gpus[0].fields == {"power", "clocks", "utilization", "temperature"}


def test_gpu_with_neither_power_nor_energy_is_a_missing_source(tmp_path: Path) -> None:
    nvml = ReplayNvml(
        [H100_BURST], unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"}
    )
    with discover(nvml=nvml, powercap=tmp_path) as sources:
        assert sources.missing[:1] == [
            "NVML: gpu0 (NVIDIA H100 80GB HBM3 #0) reports neither power (Not Supported) "
            "nor an energy counter (Not Supported)"
        ]


def test_gpus_are_chosen_by_uuid_and_an_unknown_one_is_named(tmp_path: Path) -> None:
    nvml = ReplayNvml([H100_BURST, H100_BURST])
    with discover([nvml.uuids[1], "GPU-nope"], nvml=nvml, powercap=tmp_path) as sources:
        assert [g.label for g in sources.gpus] == ["gpu1"]
        assert sources.missing[:1] == ["NVML: GPU GPU-nope not found (Not Found)"]
    assert nvml.shutdowns == 1


def test_a_cpu_device_uses_no_gpu() -> None:
    assert gpus_in_use(torch.device("cpu")) == []


# --- sampling ---------------------------------------------------------------------------------------------


def test_replayed_gpu_series_becomes_samples_and_joules(tmp_path: Path) -> None:
    clock = ManualClock()
    start = clock.now_ns
    with discover(nvml=ReplayNvml([H100_BURST], clock=clock), powercap=tmp_path) as sources:
        sampler = PowerSampler(sources, clock=clock)
        replay(clock, sampler, H100_BURST, start)
        samples = sampler.trace().samples
    assert list(samples["device"].unique()) == ["gpu0"]
    assert samples["tick"].tolist() == list(range(13))
    assert samples["t_ns"].tolist() == [start + r[0] * MS for r in H100_BURST]
    assert samples["power_w"].tolist() == [r[1] / 1000 for r in H100_BURST]
    assert samples["energy_j"].tolist() == [(r[2] - H100_BURST[0][2]) / 1000 for r in H100_BURST]
    assert samples[["sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct", "mem_util_pct", "temperature_c"]].iloc[
        5
    ].tolist() == [1980, 2619, 100, 43, 45]
    assert integrate(samples) == pytest.approx(BURST_JOULES, abs=1e-9)

    # one step: forward 100–300 ms, backward 300–500 ms
    phases = pd.DataFrame(
        {"step": [0, 0], "phase": ["forward", "backward"],
         "start_ns": [start + 100 * MS, start + 300 * MS], "end_ns": [start + 300 * MS, start + 500 * MS]}
    )  # fmt: skip
    table = energy_table(samples, phases, flops={"forward": 1e12, "backward": 2e12}, tokens_per_step=4096)
    gpu = table[table["device"] == "gpu0"].set_index("scope")
    assert gpu.loc["forward", "method"] == "counter"
    assert gpu.loc["forward", "joules"] == pytest.approx(127.499)  # 48_214_046_896 - 48_213_919_397 mJ
    assert gpu.loc["backward", "joules"] == pytest.approx(131.977)  # 48_214_178_873 - 48_214_046_896 mJ
    assert gpu.loc["run", "joules"] == pytest.approx(259.476)
    assert gpu.loc["forward", "peak_w"] == 700.16
    assert gpu.loc["forward", "avg_w"] == pytest.approx(127.499 / 0.2)
    assert gpu.loc["backward", "flops_per_j"] == pytest.approx(2e12 / 131.977)
    assert gpu.loc["run", "tokens_per_j"] == pytest.approx(4096 / 259.476)


def test_without_the_counter_the_same_series_integrates_to_the_same_joules(tmp_path: Path) -> None:
    clock = ManualClock()
    start = clock.now_ns
    nvml = ReplayNvml([H100_BURST], clock=clock, unsupported={"nvmlDeviceGetTotalEnergyConsumption"})
    with discover(nvml=nvml, powercap=tmp_path) as sources:
        sampler = PowerSampler(sources, clock=clock)
        replay(clock, sampler, H100_BURST, start)
        samples = sampler.trace().samples
    assert samples["energy_j"].isna().all()
    window = pd.DataFrame(
        {"step": [0], "phase": ["forward"], "start_ns": [start], "end_ns": [start + 600 * MS]}
    )
    row = energy_table(samples, window).set_index(["scope", "device"]).loc[("run", "gpu0")]
    assert row["method"] == "power"
    assert row["joules"] == pytest.approx(BURST_JOULES)


def test_rapl_counter_wrap_around_is_undone(tmp_path: Path) -> None:
    max_uj = 262_143_328_850  # a real package zone's max_energy_range_uj
    root = rapl_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 262_140_000_000, max_uj)})
    clock = ManualClock()
    start = clock.now_ns
    with discover([], powercap=root) as sources:
        assert [(d.label, d.max_energy_uj) for d in sources.rapl] == [("cpu-package-0", max_uj)]
        sampler = PowerSampler(sources, clock=clock)
        for i, uj in enumerate([262_140_000_000, 262_143_000_000, 1_500_000, 4_500_000]):
            set_energy(root, "intel-rapl:0", uj)
            clock.now_ns = start + i * 50 * MS
            sampler.sample()
        samples = sampler.trace().samples
    # +3 J, then a wrap: (max - 262_143_000_000) + 1_500_000 µJ = 1.82885 J, then +3 J
    assert samples["energy_j"].tolist() == pytest.approx([0, 3, 4.82885, 7.82885])
    assert samples["power_w"].isna().all()
    window = pd.DataFrame(
        {"step": [0], "phase": ["forward"], "start_ns": [start], "end_ns": [start + 150 * MS]}
    )
    row = energy_table(samples, window).set_index(["scope", "device"]).loc[("run", "cpu-package-0")]
    assert row["joules"] == pytest.approx(7.82885)
    assert row["avg_w"] == pytest.approx(7.82885 / 0.15)
    assert row["peak_w"] == pytest.approx(60.0)  # 3 J in 50 ms, the highest period average


def test_only_package_zones_are_read(tmp_path: Path) -> None:
    root = rapl_tree(
        tmp_path / "powercap",
        {
            "intel-rapl:0": ("package-0", 1, 100),
            "intel-rapl:1": ("package-1", 2, 100),
            "intel-rapl:2": ("psys", 3, 100),
        },
    )
    assert [d.label for d in discover([], powercap=root).rapl] == ["cpu-package-0", "cpu-package-1"]


def test_sampler_thread_samples_every_period_and_brackets_the_window(tmp_path: Path) -> None:
    nvml = ReplayNvml([H100_BURST])
    with discover(nvml=nvml, powercap=tmp_path) as sources:
        before = time.perf_counter_ns()
        with PowerSampler(sources, period_s=0.01) as sampler:
            # 30 periods' time on an idle machine; on a busy one, as long as 8 samples take
            wait_until(
                lambda: len(sampler.gpu_samples) >= 8 and time.perf_counter_ns() - before >= 300 * MS,
                120,
                "8 samples over 300 ms",
            )
        after = time.perf_counter_ns()
        trace = sampler.stop()  # stopping again changes nothing
    samples = trace.samples
    assert trace.notes == [] and trace.period_s == 0.01
    assert len(samples) >= 8
    assert samples["tick"].tolist() == list(range(len(samples)))
    t = samples["t_ns"].to_numpy()
    assert (np.diff(t) > 0).all() and before <= t[0] and t[-1] <= after
    assert t[-1] - t[0] >= 300 * MS
    recorded = {r[1] / 1000 for r in H100_BURST}
    assert set(samples["power_w"]) <= recorded
    assert (np.diff(samples["energy_j"]) >= 0).all()
    assert sampler._thread is not None and not sampler._thread.is_alive()


def test_sampler_cannot_start_twice(tmp_path: Path) -> None:
    with discover(nvml=ReplayNvml([H100_BURST]), powercap=tmp_path) as sources:
        sampler = PowerSampler(sources, period_s=0.01).start()
        try:
            with pytest.raises(RuntimeError, match="already been started"):
                sampler.start()
        finally:
            sampler.stop()


def test_failed_reads_leave_gaps_and_are_counted(tmp_path: Path) -> None:
    clock = ManualClock()
    with discover(nvml=LosesGpuNvml([H100_BURST], clock=clock), powercap=tmp_path) as sources:
        sampler = PowerSampler(sources, clock=clock)
        replay(clock, sampler, H100_BURST[:3], clock.now_ns)
        trace = sampler.trace()
    assert trace.notes == ["gpu0: power (GPU is lost): failed 3 time(s)"]
    assert trace.samples["power_w"].isna().all()
    assert trace.samples["energy_j"].notna().all()  # the counter still answers


def test_period_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        PowerSampler(discover([], powercap=tmp_path), period_s=0)
