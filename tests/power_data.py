"""What the power tests replay: an NVML stand-in, one GPU series, a hand-settable clock, a powercap tree.

No GPU is reachable where these tests run, so NVML is the one outside thing replaced: `ReplayNvml` has the
functions and constants of nvidia-ml-py that harness.energy.power calls, answers from a series keyed by time
since
nvmlInit, and raises the real pynvml.NVMLError for what the series marks unsupported. Everything else
(the sampler thread, RAPL files, the arithmetic) is the real code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

import pynvml

# One GPU going from idle into a training burst and back, every 50 ms, in NVML's units: power in mW,
# the total-energy counter in mJ since the driver loaded, clocks in MHz, utilisation in %, temperature in °C.
# Written for these tests in the shape an H100 SXM reports (no GPU was at hand to record one); the counter
# is the trapezoid integral of the power column, so both routes to joules must agree: 291.034 J in 600 ms.
SERIES_COLUMNS = ("t_ms", "power_mw", "energy_mj", "sm_mhz", "mem_mhz", "util_gpu", "util_mem", "temp_c")
H100_BURST = [
    (0, 72_360, 48_213_906_120, 345, 2619, 0, 0, 31),
    (50, 74_120, 48_213_909_782, 345, 2619, 0, 0, 31),
    (100, 310_480, 48_213_919_397, 1755, 2619, 45, 12, 33),
    (150, 655_040, 48_213_943_535, 1980, 2619, 100, 38, 38),
    (200, 690_320, 48_213_977_169, 1980, 2619, 100, 41, 42),
    (250, 700_160, 48_214_011_931, 1980, 2619, 100, 43, 45),
    (300, 698_440, 48_214_046_896, 1965, 2619, 100, 42, 47),
    (350, 702_080, 48_214_081_909, 1980, 2619, 100, 44, 49),
    (400, 695_120, 48_214_116_839, 1965, 2619, 100, 43, 50),
    (450, 688_000, 48_214_151_417, 1950, 2619, 100, 41, 51),
    (500, 410_240, 48_214_178_873, 1755, 2619, 52, 18, 52),
    (550, 120_480, 48_214_192_141, 1410, 2619, 3, 1, 51),
    (600, 80_040, 48_214_197_154, 345, 2619, 0, 0, 50),
]
BURST_JOULES = 291.034


class ManualClock:
    """A perf_counter_ns the test sets by hand."""

    def __init__(self, now_ns: int = 1_000_000_000) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


class ReplayNvml:
    """The part of nvidia-ml-py harness.energy.power uses, replaying `series` per GPU by time since nvmlInit.

    Each GPU answers with the last row whose t_ms has passed (the first row before that). `unsupported`
    lists NVML function names every GPU answers with NVML_ERROR_NOT_SUPPORTED.
    """

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(
        self,
        series: list[list[tuple[int, ...]]],
        *,
        names: Iterable[str] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        unsupported: Iterable[str] = (),
    ) -> None:
        self.series = series
        self.names = list(names or [f"NVIDIA H100 80GB HBM3 #{i}" for i in range(len(series))])
        self.uuids = [f"GPU-0000000{i}-1111-2222-3333-444444444444" for i in range(len(series))]
        self.clock = clock
        self.unsupported = set(unsupported)
        self.started_ns: int | None = None
        self.calls: list[str] = []
        self.shutdowns = 0

    def _answer(self, fn: str, handle: int, column: str) -> int:
        self.calls.append(fn)
        if fn in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.started_ns is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        elapsed_ms = (self.clock() - self.started_ns) / 1e6
        rows = self.series[handle]
        row = rows[0]
        for candidate in rows:
            if candidate[0] <= elapsed_ms:
                row = candidate
        return row[SERIES_COLUMNS.index(column)]

    def nvmlInit(self) -> None:
        self.started_ns = self.clock()

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"  # the driver of the H100 in docs/gpu.md

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000  # CUDA 13.0

    def nvmlDeviceGetCount(self) -> int:
        return len(self.series)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.series):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        if uuid not in self.uuids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self.uuids.index(uuid)

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.names[handle]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._answer("nvmlDeviceGetPowerUsage", handle, "power_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self._answer("nvmlDeviceGetTotalEnergyConsumption", handle, "energy_mj")

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        column = "sm_mhz" if kind == pynvml.NVML_CLOCK_SM else "mem_mhz"
        return self._answer("nvmlDeviceGetClockInfo", handle, column)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        gpu = self._answer("nvmlDeviceGetUtilizationRates", handle, "util_gpu")
        return SimpleNamespace(
            gpu=gpu, memory=self._answer("nvmlDeviceGetUtilizationRates", handle, "util_mem")
        )

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._answer("nvmlDeviceGetTemperature", handle, "temp_c")


def rapl_tree(root: Path, zones: dict[str, tuple[str, int, int]]) -> Path:
    """A powercap folder laid out like Linux's: zones {"intel-rapl:0": (name, energy_uj, max_range_uj)},
    each with a core sub-zone (intel-rapl:0:0) the harness must not count twice."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "intel-rapl").mkdir(exist_ok=True)  # the control type folder: no energy of its own
    for zone, (name, energy, max_range) in zones.items():
        folder = root / zone
        folder.mkdir()
        (folder / "name").write_text(name + "\n")
        (folder / "energy_uj").write_text(f"{energy}\n")
        (folder / "max_energy_range_uj").write_text(f"{max_range}\n")
        core = root / f"{zone}:0"
        core.mkdir()
        (core / "name").write_text("core\n")
        (core / "energy_uj").write_text("5\n")
        (core / "max_energy_range_uj").write_text(f"{max_range}\n")
    return root


def set_energy(root: Path, zone: str, energy_uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{energy_uj}\n")
