"""`harness run --power`: sample power over a run's measured steps and add the energy figures to its result.

The sources and the sampler are harness/energy/power.py's, the arithmetic analysis/runs/energy.py's; this
module only joins them to a run: the sampler runs over the measured window, and the run keeps its samples
with the analytic FLOPs and tokens of a step; before the run is stored (harness.profilers.capture.finish)
the phases' start times and durations become the intervals the energy is shared out over, and the FLOPs and
tokens become FLOPs/J and tokens/J.
Whatever goes wrong here becomes a line in result.extra["power_notes"]:
a finished run is never lost to it. `energy_rows` shows the energy table a run keeps (`run` and `show`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from harness.core.errors import first_line
from harness.core.records import RunConfig, RunResult
from harness.energy.power import SAMPLE_COLUMNS, PowerSampler, PowerSources, discover, gpus_in_use
from workloads import flops

if TYPE_CHECKING:
    import pandas as pd

NOTES = "power_notes"  # result.extra keys
NOTES_TITLE = "power notes"  # the notes as people read them: `show`'s field, `run`'s table in csv and json
TABLE = "energy"
SUMMARY = "energy_summary"
SAMPLES = "power_samples"  # what the worker sampled, turned into TABLE and SUMMARY before the run is stored


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
        """Put the notes and what was sampled (SAMPLES: the samples, and a step's analytic FLOPs and tokens)
        into result.extra; the energy figures are computed from them with the run's other figures, before
        it is stored (harness.profilers.capture.finish)."""
        try:
            self._keep(result, spec)
        except Exception as e:
            self.notes.append(f"energy not computed ({type(e).__name__}: {first_line(e)})")
        finally:
            if self._owned:
                self.sources.close()
        result.extra[NOTES] = list(dict.fromkeys(self.notes))

    def _keep(self, result: RunResult, spec: Any) -> None:
        if self.sampler is None:
            return
        trace = self.sampler.trace()
        self.notes.extend(trace.notes)
        flops, tokens = step_work(result, spec)
        frame = trace.samples.to_dict(orient="split", index=False)
        result.extra[SAMPLES] = {"samples": frame, "flops": flops, "tokens_per_step": tokens}


def kept_samples(kept: dict[str, Any]) -> pd.DataFrame:
    """The samples a run kept (SAMPLES), as the sampler gave them."""
    import pandas as pd

    frame = pd.DataFrame(kept["data"], columns=kept["columns"])
    floats = [c for c in SAMPLE_COLUMNS if c not in ("device", "tick", "t_ns")]
    return frame.astype({"tick": "int64", "t_ns": "int64", **dict.fromkeys(floats, "float64")})


def intervals(result: RunResult) -> pd.DataFrame:
    """The measured steps' phases as energy is shared out over them: step, phase, start_ns, end_ns."""
    import pandas as pd

    return pd.DataFrame(
        [
            (s.step, phase, s.starts[phase], s.starts[phase] + ns)
            for s in result.steps
            if not s.warmup
            for phase, ns in s.phases.items()
            if phase in s.starts
        ],
        columns=["step", "phase", "start_ns", "end_ns"],
    )


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
