"""Everything that reads power and energy: NVML (nvidia-ml-py) for GPUs, RAPL (Linux powercap) for CPU
packages. No other module samples either; the counters' readings are turned into energy here (their
wrap-around undone), the arithmetic over the samples is in analysis/runs/energy.py.

    with discover(gpus_in_use(device)) as sources:
        for line in sources.messages():        # each missing source once, with the reason
            note(line)
        with PowerSampler(sources, period_s=0.05) as sampler:
            ...                                 # the measured steps
        trace = sampler.trace()                 # samples frame + notes

`discover` says which sources exist and, for each one that does not, why ("NVML: NVML Shared Library Not
Found", "RAPL: /sys/class/powercap not present"). The sampler thread reads every source each period and
stamps each reading with time.perf_counter_ns(), the clock the phase timers use, so samples and phases line
up without conversion. NVML is passed in as a module object (`nvml=`): tests hand in a stand-in that replays
a recorded series, since no GPU is at hand where they run.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import first_line

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PERIOD_S = 0.05
POWERCAP = Path("/sys/class/powercap")
RAPL_ZONE = re.compile(r"intel-rapl:\d+")  # top-level zones; intel-rapl:0:0 (core, dram…) are sub-zones
# The fields read from each GPU, by NVML function; a GPU that answers NotSupported for one is not asked again.
GPU_FIELDS = ("power", "energy", "clocks", "utilization", "temperature")
SAMPLE_COLUMNS = [
    "device",
    "tick",
    "t_ns",
    "power_w",
    "energy_j",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "gpu_util_pct",
    "mem_util_pct",
    "temperature_c",
]


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's index (physical order, not CUDA_VISIBLE_DEVICES order)
    name: str
    handle: Any
    fields: frozenset[str]  # the GPU_FIELDS it answers

    @property
    def label(self) -> str:
        return f"gpu{self.index}"


@dataclass(frozen=True)
class RaplDomain:
    label: str  # "cpu-package-0"
    path: Path  # the zone folder, /sys/class/powercap/intel-rapl:0
    max_energy_uj: int  # energy_uj goes back to 0 after this


@dataclass
class PowerSources:
    """The sources found, and one line for each that is missing. Holds NVML open until `close()`."""

    gpus: list[Gpu] = field(default_factory=list)
    rapl: list[RaplDomain] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # "NVML: …", "RAPL: …"
    notes: list[str] = field(default_factory=list)  # sources that work with less (no energy counter)
    nvml: Any = None  # the initialised NVML module while GPUs are in use

    def messages(self) -> list[str]:
        return [*self.missing, *self.notes]

    @property
    def any(self) -> bool:
        return bool(self.gpus or self.rapl)

    def close(self) -> None:
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None

    def __enter__(self) -> PowerSources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def discover(
    gpus: Sequence[int | str] | None = None, *, nvml: Any = None, powercap: Path = POWERCAP
) -> PowerSources:
    """Find the power sources: NVML for `gpus` (NVML indices or UUIDs; None: every GPU NVML sees; empty:
    none, as for a CPU run) and RAPL package zones under `powercap`. Never raises for a missing source."""
    sources = PowerSources()
    if gpus is None or len(gpus):
        _discover_gpus(sources, gpus, nvml)
    _discover_rapl(sources, Path(powercap))
    return sources


@dataclass(frozen=True)
class Driver:
    """What NVML says of the NVIDIA driver: its version, the newest CUDA it runs ("13.0"), its GPUs; or why
    it says nothing (`missing`)."""

    version: str | None = None
    cuda: str | None = None
    gpus: int = 0
    missing: str | None = None


def driver(nvml: Any = None) -> Driver:
    """The driver as NVML reports it (nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion: 13000 is
    CUDA 13.0). Never raises: no nvidia-ml-py or no driver is a `missing` line."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return Driver(missing="nvidia-ml-py not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return Driver(missing=f"not available: {first_line(e)} (no NVIDIA driver on this machine)")
    try:
        version = nvml.nvmlSystemGetDriverVersion()
        version = version.decode() if isinstance(version, bytes) else str(version)
        gpus = int(nvml.nvmlDeviceGetCount())
        try:
            number = int(nvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{number // 1000}.{number % 1000 // 10}"
        except nvml.NVMLError:
            cuda = None
    except nvml.NVMLError as e:
        return Driver(missing=f"the driver did not answer: {first_line(e)}")
    finally:
        nvml.nvmlShutdown()
    return Driver(version=version, cuda=cuda, gpus=gpus)


def _not_supported(nvml: Any, error: Exception) -> bool:
    return getattr(error, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)


def _discover_gpus(sources: PowerSources, wanted: Sequence[int | str] | None, nvml: Any) -> None:
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            sources.missing.append("NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py)")
            return
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        sources.missing.append(f"NVML: {first_line(e)}")
        return
    sources.nvml = nvml
    try:
        wanted = list(range(nvml.nvmlDeviceGetCount())) if wanted is None else list(wanted)
    except nvml.NVMLError as e:
        sources.missing.append(f"NVML: cannot count GPUs ({first_line(e)})")
        wanted = []
    for item in wanted:
        try:
            if isinstance(item, str):
                handle = nvml.nvmlDeviceGetHandleByUUID(item)
                index = int(nvml.nvmlDeviceGetIndex(handle))
            else:
                handle, index = nvml.nvmlDeviceGetHandleByIndex(item), int(item)
            name = nvml.nvmlDeviceGetName(handle)
        except nvml.NVMLError as e:
            sources.missing.append(f"NVML: GPU {item} not found ({first_line(e)})")
            continue
        name = name.decode() if isinstance(name, bytes) else str(name)
        gpu = _probe(nvml, Gpu(index, name, handle, frozenset(GPU_FIELDS)), sources)
        if gpu.fields:
            sources.gpus.append(gpu)
    if not sources.gpus:
        sources.close()


def _probe(nvml: Any, gpu: Gpu, sources: PowerSources) -> Gpu:
    """Ask each field once; keep those the GPU answers and say what it does not."""
    answered, why = set(), {}
    for name in GPU_FIELDS:
        try:
            _READERS[name](nvml, gpu.handle)
            answered.add(name)
        except nvml.NVMLError as e:
            why[name] = first_line(e)
    who = f"{gpu.label} ({gpu.name})"
    if "power" not in answered and "energy" not in answered:
        sources.missing.append(
            f"NVML: {who} reports neither power ({why['power']}) nor an energy counter ({why['energy']})"
        )
    elif "energy" not in answered:
        sources.notes.append(
            f"NVML: {who} has no total-energy counter ({why['energy']}); energy is integrated from power"
        )
    for name in sorted(set(why) - {"power", "energy"}):
        sources.notes.append(f"NVML: {who} does not report {name} ({why[name]})")
    return Gpu(gpu.index, gpu.name, gpu.handle, frozenset(answered))


_READERS: dict[str, Callable[[Any, Any], tuple[float | None, ...]]] = {
    # watts (NVML: milliwatts)
    "power": lambda nvml, h: (nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,),
    # millijoules since the driver loaded (Volta and later)
    "energy": lambda nvml, h: (nvml.nvmlDeviceGetTotalEnergyConsumption(h),),
    "clocks": lambda nvml, h: (
        nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
    ),
    "utilization": lambda nvml, h: _utilization(nvml.nvmlDeviceGetUtilizationRates(h)),
    "temperature": lambda nvml, h: (nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),),
}


def _utilization(rates: Any) -> tuple[float, float]:
    """Percent of the last sample period (1/6 s to 1 s, by GPU) a kernel ran / memory was busy."""
    return rates.gpu, rates.memory


def _discover_rapl(sources: PowerSources, powercap: Path) -> None:
    try:
        zones = sorted(p for p in powercap.iterdir() if RAPL_ZONE.fullmatch(p.name))
    except FileNotFoundError:
        sources.missing.append(f"RAPL: {powercap} not present")
        return
    except OSError as e:
        sources.missing.append(f"RAPL: {powercap} not readable ({e.strerror or first_line(e)})")
        return
    if not zones:
        sources.missing.append(f"RAPL: no intel-rapl zones in {powercap}")
        return
    for zone in zones:
        try:
            name = (zone / "name").read_text().strip()
            if not name.startswith("package"):
                continue  # psys: the whole platform, not a CPU package
            int((zone / "energy_uj").read_text())
            max_uj = int((zone / "max_energy_range_uj").read_text())
        except OSError as e:
            hint = (
                "; root only since Linux 5.10: run as root or `sudo chmod a+r` the energy_uj files"
                if isinstance(e, PermissionError)
                else ""
            )
            sources.missing.append(
                f"RAPL: {zone / 'energy_uj'} not readable ({e.strerror or first_line(e)}){hint}"
            )
            continue
        except ValueError as e:
            sources.missing.append(f"RAPL: {zone} holds an unreadable value ({first_line(e)})")
            continue
        sources.rapl.append(RaplDomain(f"cpu-{name}", zone, max_uj))
    if not sources.rapl and not any(m.startswith("RAPL") for m in sources.missing):
        sources.missing.append(f"RAPL: no package zone among {', '.join(z.name for z in zones)}")


@dataclass(frozen=True)
class GpuSample:
    tick: int
    t_ns: int
    index: int
    power_w: float | None
    energy_mj: float | None  # NVML's total-energy counter as read
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    gpu_util_pct: float | None
    mem_util_pct: float | None
    temperature_c: float | None


@dataclass(frozen=True)
class RaplSample:
    tick: int
    t_ns: int
    label: str
    energy_uj: int  # energy_uj as read: wraps to 0 after the zone's max_energy_range_uj


@dataclass
class PowerTrace:
    """What a sampler recorded: the samples frame (analysis.runs.energy's schema plus the GPU readings) and a
    line for each kind of read that failed."""

    samples: pd.DataFrame
    notes: list[str]
    period_s: float


class PowerSampler:
    """A thread reading every source each `period_s`, plus one reading at start() and one at stop(), so the
    samples bracket the measured window. Start/stop, or use as a context manager.

    A read that fails is left empty and counted (trace().notes); the thread never takes the run down.
    """

    def __init__(
        self,
        sources: PowerSources,
        period_s: float = PERIOD_S,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"the power sampling period must be positive, got {period_s}")
        self.sources = sources
        self.period_s = period_s
        self.clock = clock
        self.gpu_samples: list[GpuSample] = []
        self.rapl_samples: list[RaplSample] = []
        self.failures: Counter[str] = Counter()
        self._tick = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Read every source once (one tick)."""
        with self._lock:
            tick = self._tick
            self._tick += 1
            for gpu in self.sources.gpus:
                self.gpu_samples.append(self._read_gpu(gpu, tick))
            for domain in self.sources.rapl:
                t = self.clock()
                try:
                    value = int((domain.path / "energy_uj").read_text())
                except (OSError, ValueError) as e:
                    self.failures[f"{domain.label}: energy_uj ({first_line(e)})"] += 1
                    continue
                self.rapl_samples.append(RaplSample(tick, t, domain.label, value))

    def _read_gpu(self, gpu: Gpu, tick: int) -> GpuSample:
        nvml = self.sources.nvml
        t = self.clock()
        values: dict[str, tuple[float | None, ...]] = {}
        for name in GPU_FIELDS:
            if name not in gpu.fields:
                continue
            try:
                values[name] = _READERS[name](nvml, gpu.handle)
            except Exception as e:  # NVMLError, or anything a driver hiccup raises: the run goes on
                self.failures[f"{gpu.label}: {name} ({first_line(e)})"] += 1
        power, energy = values.get("power", (None,)), values.get("energy", (None,))
        sm, mem = values.get("clocks", (None, None))
        util, mem_util = values.get("utilization", (None, None))
        (temp,) = values.get("temperature", (None,))
        return GpuSample(tick, t, gpu.index, power[0], energy[0], sm, mem, util, mem_util, temp)

    def _loop(self) -> None:
        deadline = time.monotonic() + self.period_s
        while not self._stop.wait(max(0.0, deadline - time.monotonic())):
            try:
                self.sample()
            except Exception as e:  # keep what was read; say why sampling stopped
                self.failures[f"sampler stopped ({type(e).__name__}: {first_line(e)})"] += 1
                return
            deadline += self.period_s
            now = time.monotonic()
            if deadline < now:  # fell behind (a long GIL hold): skip ticks rather than burst
                deadline = now + self.period_s

    def start(self) -> PowerSampler:
        if self._thread is not None:
            raise RuntimeError("this sampler has already been started")
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="harness-power", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> PowerTrace:
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.sample()
        return self.trace()

    def __enter__(self) -> PowerSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def trace(self) -> PowerTrace:
        with self._lock:
            gpu, rapl = list(self.gpu_samples), list(self.rapl_samples)
            notes = [f"{what}: failed {n} time(s)" for what, n in sorted(self.failures.items())]
        frame, frame_notes = samples_frame(gpu, rapl, {d.label: d.max_energy_uj for d in self.sources.rapl})
        return PowerTrace(frame, [*notes, *frame_notes], self.period_s)


def samples_frame(
    gpu: Sequence[GpuSample], rapl: Sequence[RaplSample], max_energy_uj: dict[str, int]
) -> tuple[pd.DataFrame, list[str]]:
    """The samples in analysis.runs.energy's schema: counters turned into joules since the first reading,
    RAPL's
    wrap-around undone; a GPU counter that goes backwards (driver reloaded) is dropped and said so."""
    import numpy as np
    import pandas as pd

    frames, notes = [], []
    g = pd.DataFrame([vars(s) for s in gpu], columns=list(GpuSample.__dataclass_fields__))
    for index, part in g.groupby("index", sort=True):
        part = part.astype({"energy_mj": float})
        energy = np.full(len(part), np.nan)
        have = part["energy_mj"].notna().to_numpy()
        try:
            energy[have] = unwrap_counter(part["energy_mj"].to_numpy()[have]) / 1e3
        except ValueError:
            notes.append(f"gpu{index}: the energy counter went backwards; energy integrated from power")
            energy[:] = np.nan
        frames.append(part.drop(columns=["index", "energy_mj"]).assign(device=f"gpu{index}", energy_j=energy))
    r = pd.DataFrame([vars(s) for s in rapl], columns=list(RaplSample.__dataclass_fields__))
    for label, part in r.groupby("label", sort=True):
        energy = unwrap_counter(part["energy_uj"].to_numpy(), max_energy_uj.get(str(label))) / 1e6
        frames.append(pd.DataFrame({"device": label, "tick": part["tick"], "t_ns": part["t_ns"],
                                    "energy_j": energy}))  # fmt: skip
    if not frames:
        return pd.DataFrame(columns=SAMPLE_COLUMNS), notes
    out = pd.concat(frames, ignore_index=True).reindex(columns=SAMPLE_COLUMNS)
    floats = [c for c in SAMPLE_COLUMNS if c not in ("device", "tick", "t_ns")]
    out = out.astype({"tick": "int64", "t_ns": "int64", **dict.fromkeys(floats, "float64")})
    return out.sort_values(["t_ns", "device"], ignore_index=True), notes


def gpus_in_use(device: Any) -> list[str | int]:
    """NVML identifiers of the GPU a torch device runs on: its UUID, which NVML and CUDA agree on whatever
    CUDA_VISIBLE_DEVICES says; an empty list for a CPU or MPS device."""
    if getattr(device, "type", str(device)) != "cuda":
        return []
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return [index]
    text = str(uuid)
    return [text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"]


def counter_increments(raw: Sequence[float] | np.ndarray, wrap: float | None = None) -> np.ndarray:
    """Increments between consecutive readings of an energy counter.

    A counter that wraps goes back to 0 after `wrap` (RAPL's max_energy_range_uj), so a reading lower than
    the one before means one wrap: the increment is `wrap - previous + current`. Sampled faster than the
    counter can wrap twice (RAPL: minutes at full load), that is exact. Without `wrap` a decrease is an error.
    """
    import numpy as np

    values = np.asarray(raw, dtype=np.float64)
    steps = np.diff(values)
    if (steps < 0).any():
        if not wrap:
            raise ValueError("the energy counter went backwards and its wrap-around range is not known")
        steps = np.where(steps < 0, steps + wrap, steps)
    return steps


def unwrap_counter(raw: Sequence[float] | np.ndarray, wrap: float | None = None) -> np.ndarray:
    """A wrapping counter's readings as energy since the first reading (same unit), monotone."""
    import numpy as np

    return np.concatenate([[0.0], np.cumsum(counter_increments(raw, wrap))]) if len(raw) else np.zeros(0)
