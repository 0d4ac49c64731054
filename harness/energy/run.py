"""`harness run --power`: sample power over a run's measured steps and add the energy figures to its result.

The sources and the sampler are harness/energy/power.py's, the arithmetic analysis/runs/energy.py's; this
module only joins them to a run: the sampler runs over the measured window, the phases' start times
and durations become the intervals, and the analytic FLOPs and tokens of a step become FLOPs/J and tokens/J.
Whatever goes wrong here becomes a line in result.extra["power_notes"]:
a finished run is never lost to it. `energy_rows` shows the energy table a run keeps (`run` and `show`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from analysis.runs.energy import energy_table, run_summary
from harness.core.errors import first_line
from harness.core.records import RunConfig, RunResult
from harness.energy.power import PowerSampler, PowerSources, discover, gpus_in_use
from workloads import flops

NOTES = "power_notes"  # result.extra keys
NOTES_TITLE = "power notes"  # the notes as people read them: `show`'s field, `run`'s table in csv and json
TABLE = "energy"
SUMMARY = "energy_summary"


class EnergyMeter:
    """One run's power sampling. `window()` wraps the measured steps; `finish()` fills result.extra."""

    def __init__(self, config: RunConfig, device: Any, sources: PowerSources | None = None) -> None:
        self.period_s = config.power_period_ms / 1000
        self.notes: list[str] = []
        self.sampler: PowerSampler | None = None
        self._owned = sources is None  # sources handed in (tests, a caller that keeps NVML open) stay open
        try:
            self.sources = sources if sources is not None else discover(gpus_in_use(device))
        except Exception as e:
            self.sources = PowerSources(
                missing=[f"power sources not found ({type(e).__name__}: {first_line(e)})"]
            )
        self.notes.extend(self.sources.messages())
        if sources is None and not gpus_in_use(device):
            self.notes.insert(0, f"NVML: not asked: the run is on the {device.type.upper()}, not a GPU")

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        if self.sources.any:
            try:
                self.sampler = PowerSampler(self.sources, self.period_s).start()
            except Exception as e:  # the run goes on unmeasured
                self.notes.append(f"power sampling did not start ({type(e).__name__}: {first_line(e)})")
        try:
            yield
        finally:
            if self.sampler is not None:
                with contextlib.suppress(Exception):
                    self.sampler.stop()

    def finish(self, result: RunResult, spec: Any) -> None:
        """Put the notes, the energy table (records) and the run's summary into result.extra."""
        try:
            self._finish(result, spec)
        except Exception as e:
            self.notes.append(f"energy not computed ({type(e).__name__}: {first_line(e)})")
        finally:
            if self._owned:
                self.sources.close()
        result.extra[NOTES] = list(dict.fromkeys(self.notes))

    def _finish(self, result: RunResult, spec: Any) -> None:
        import pandas as pd

        if self.sampler is None:
            return
        trace = self.sampler.trace()
        self.notes.extend(trace.notes)
        intervals = pd.DataFrame(
            [
                (s.step, phase, s.starts[phase], s.starts[phase] + ns)
                for s in result.steps
                if not s.warmup
                for phase, ns in s.phases.items()
                if phase in s.starts
            ],
            columns=["step", "phase", "start_ns", "end_ns"],
        )
        flops, tokens = step_work(result, spec)
        table = energy_table(trace.samples, intervals, flops=flops, tokens_per_step=tokens)
        if table.empty:
            self.notes.append("no energy: no measured step lies inside the power samples")
            return
        result.extra[TABLE] = json.loads(table.to_json(orient="records"))  # NaN -> null
        result.extra[SUMMARY] = run_summary(table)


def step_work(result: RunResult, spec: Any) -> tuple[dict[str, float], float | None]:
    """Analytic FLOPs of each phase of one step, and the tokens one step processes (as `_throughput`)."""
    config, b = result.config, result.config.batch_size
    if config.mode == "generate":
        p = result.model.context_length if result.model else spec.context_length
        n = config.new_tokens
        decode = sum(flops.decode_flops(spec, b, p + k + 1) for k in range(n - 1))
        return {"prefill": float(flops.forward_flops(spec, b, p)), "decode": float(decode)}, float(b * n)
    forward = float(flops.forward_flops(spec, b, spec.context_length))
    tokens = float(b * spec.context_length)
    if config.mode == "train":
        return {"forward": forward, "backward": 2 * forward}, tokens
    return {"forward": forward}, tokens


if TYPE_CHECKING:
    import pandas as pd


def energy_rows(records: list[dict[str, object]]) -> pd.DataFrame:
    """The energy table a run keeps (analysis.runs.energy.ENERGY_COLUMNS as records) for people."""
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    cols = {
        "scope": "scope", "device": "device", "method": "method", "joules": "energy (J)",
        "avg_w": "avg power (W)", "peak_w": "peak power (W)", "samples": "samples",
        "flops_per_j": "FLOPs/J", "tokens_per_j": "tokens/J",
    }  # fmt: skip
    return df.reindex(columns=list(cols)).rename(columns=cols)
