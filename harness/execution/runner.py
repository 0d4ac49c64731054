"""Run one workload configuration in this process and time it: train, forward or generate."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from harness.core import env, nvtx_ranges
from harness.core.devices import (
    device_name,
    free_memory,
    is_oom,
    peak_memory_bytes,
    reset_peak_memory,
    resolve_device,
)
from harness.core.records import STEP_RANGE, ModelInfo, RunConfig, RunResult, StepRecord, new_id
from harness.core.signals import interrupted, signal_of
from harness.energy.run import EnergyMeter
from harness.execution import block_timers, memory
from harness.execution.body import Body, BodyFactory, autocast
from harness.execution.checks import run_spec
from harness.execution.compiled import dynamo_counts, record_dynamo, record_inductor_cache
from harness.execution.generate import generate_body, prompt_length, serving_figures
from harness.execution.memory import MemoryRecorder
from harness.execution.timing import PhaseClock
from workloads.names import (
    ALLREDUCE,
    BACKWARD,
    DATA,
    FORWARD,
    MEASURED,
    OPTIMIZER,
)

if TYPE_CHECKING:
    from pathlib import Path

    from harness.energy.power import PowerSources

import workloads
from workloads import flops, peak
from workloads import memory as workload_memory

ProgressFn = Callable[[int, int], None]
StepFn = Callable[[StepRecord], None]
WindowFn = Callable[[], contextlib.AbstractContextManager[Any]]
__all__ = ["Body", "BodyFactory", "run_workload"]


class StepHook(Protocol):
    """An in-process profiler (harness.profilers.torch): on around the step loop, told of each step's end."""

    def recording(self) -> contextlib.AbstractContextManager[Any]: ...

    def step(self) -> None: ...


def planned_model(config: RunConfig) -> ModelInfo | None:
    """The model a run of `config` builds, told from its spec alone (its parameters by the closed form,
    workloads.memory.param_count, which counts what build_model makes): what a run whose worker died
    before it wrote its result stores. None for a size that is not known."""
    try:
        spec = run_spec(config)
    except ValueError:
        return None
    context = prompt_length(config, spec) if config.mode == "generate" else None
    return ModelInfo.from_spec(spec, workload_memory.param_count(spec)[0], context)


def run_workload(
    config: RunConfig,
    *,
    run_id: str | None = None,
    progress: ProgressFn | None = None,
    on_step: StepFn | None = None,
    power_sources: PowerSources | None = None,
    hook: StepHook | None = None,
    make_body: BodyFactory | None = None,
    memory_dir: Path | None = None,
) -> RunResult:
    """Build the model, warm up, then time `config.steps` steps phase by phase.

    Out of memory is caught and recorded (status "oom"), and so are Ctrl-C and SIGTERM (status
    "interrupted", see harness.core.signals), each with the steps finished before it; anything else
    propagates.
    With config.power the measured steps are sampled (harness.energy.run); `power_sources` replaces the
    discovered sources (tests hand in theirs). `on_step` sees every step as soon as it is finished; `hook`
    (an in-process profiler) is started around the step loop and told of the end of every step.
    `make_body` replaces the mode's step (harness.execution.ranks.distributed: the train step of one rank of
    several). With
    config.memory the measured steps are recorded by harness.execution.memory (files in `memory_dir`).
    """
    import torch

    device = resolve_device(config.device)  # the configuration was checked (harness.execution.checks)
    spec = run_spec(config)
    result = RunResult(
        run_id=run_id or new_id(config.model),
        config=config,
        status="ok",
        device=device.type,
        device_name=device_name(device),
        env=env.collect(device),
    )
    torch.manual_seed(config.seed)
    compiled_before = dynamo_counts()
    reset_peak_memory(device)
    meter = None
    if config.power:
        meter = EnergyMeter(config, device, power_sources)
    recorder = MemoryRecorder(device, result.run_id, memory_dir) if config.memory else None
    windows = [w.window for w in (meter, recorder) if w is not None]

    timers: block_timers.BlockTimers | None = None
    figures: dict[str, Any] = {}  # what the mode's body knows of itself (generate: decode path, KV cache)

    def step_done(done: int, total: int) -> None:
        if timers:
            timers.next_step()
        if hook:
            hook.step()
        if on_step:
            on_step(result.steps[-1])
        if progress:
            progress(done, total)

    try:
        model = workloads.build_model(spec, attention=config.attention, seed=config.seed).to(device)
        context = prompt_length(config, spec) if config.mode == "generate" else None
        result.model = ModelInfo.from_spec(spec, workloads.count_params(model), context)
        if config.nvtx_detail:
            nvtx_ranges.attach_detail_ranges(model, workloads.DETAIL_RANGES, workloads.OUTER_RANGES)
            if block_timers.wanted(config, hook is not None):
                timers = block_timers.BlockTimers(model, device, config)
        body = (make_body or BODIES[config.mode])(config, spec, model, device)
        figures = body.figures
        with hook.recording() if hook else contextlib.nullcontext():
            _loop(config, body, device, result, step_done, _windows(windows))
    except KeyboardInterrupt as e:
        measured = sum(not s.warmup for s in result.steps)
        result.status = "interrupted"
        result.error = interrupted(signal_of(e), f"after {measured} of {config.steps} measured steps")
    except Exception as e:
        if not is_oom(e):
            raise
        result.status = "oom"
        result.error = _oom_message(e)
        free_memory(device)
    if timers:
        timers.remove()
        result.blocks = timers.records()
    result.peak_memory_bytes = peak_memory_bytes(device)
    _throughput(config, spec, result, figures)
    record_inductor_cache(result)
    record_dynamo(result, compiled_before)
    memory.record(result, config, spec, device)
    if recorder is not None:
        recorder.finish(result)
    if meter is not None:
        meter.finish(result, spec)
    return result


def _windows(windows: list[WindowFn]) -> WindowFn:
    """One window opening all of `windows` (power sampling, memory recording) in order."""

    @contextlib.contextmanager
    def both() -> Any:
        with contextlib.ExitStack() as stack:
            for window in windows:
                stack.enter_context(window())
            yield

    return both


def _oom_message(error: BaseException) -> str:
    line = str(error).splitlines()[0] if str(error) else "out of memory"
    # the CPU allocator's message starts with where in C++ it failed: "[enforce fail at alloc_cpu.cpp:127] …"
    return re.sub(r"^\[enforce fail at [^\]]*\] err == 0\. ", "", line)


def _steps(config: RunConfig, window: WindowFn = contextlib.nullcontext):
    """Step indices with the `measured` NVTX range and `window()` (power sampling) opened before the first
    measured step and closed after the last."""
    total = config.warmup + config.steps
    opened = False
    with contextlib.ExitStack() as stack:
        try:
            for i in range(total):
                if i == config.warmup:
                    nvtx_ranges.push(MEASURED)
                    opened = True
                    stack.enter_context(window())
                yield i, i < config.warmup, total
        finally:
            if opened:
                nvtx_ranges.pop()


def _loop(
    config: RunConfig,
    body: Body,
    device: Any,
    result: RunResult,
    step_done: ProgressFn,
    window: WindowFn = contextlib.nullcontext,
) -> None:
    """The one step loop every mode and profiler shares: warmup, then measured steps, each in its NVTX
    `step` range, each recorded as soon as it is finished."""
    clock = PhaseClock(device)
    with body.context:
        for i, warm, total in _steps(config, window):
            clock.reset()
            state = body.prepare()
            with nvtx_ranges.nvtx_range(STEP_RANGE, i):
                body.step(i, clock, state)
            result.steps.append(
                StepRecord(
                    step=i,
                    warmup=warm,
                    phases=dict(clock.durations),
                    starts=dict(clock.starts),
                    tokens=list(clock.tokens),
                )
            )
            step_done(i + 1, total)


def train_body(
    config: RunConfig,
    spec: Any,
    model: Any,
    device: Any,
    *,
    rank: int = 0,
    wrap: Callable[[Any], Any] | None = None,
    allreduce: Callable[[list[Any]], None] | None = None,
    mark: Callable[[int, str], None] | None = None,
) -> Body:
    """The train step. Across ranks (harness.execution.ranks.distributed) `wrap` makes the model a DDP
    module, forward and
    backward run under its no_sync() and `allreduce` averages the gradients as a phase of its own; `mark`
    hears each phase start; each rank draws its own batch (seed + rank).

    `config.plant` plants one known cause through the hooks of workloads.plants (its optimizer, its batch
    source, its loss, what follows the loss, a context around the steps), each inside the phase where a
    user's would be: a planted batch source is fetched at the start of forward inside the NVTX range
    `data` (workloads.names.DATA), so its wait counts in the step and is told apart in a capture. The
    knobs of the configuration (`config.knobs`) are handed to the plant: AdamW's implementation for every
    step, a planted step's fixes."""
    import torch

    plant = workloads.plants.make(config.plant, config.knobs)
    gen = torch.Generator().manual_seed(config.seed + rank)
    x, y = workloads.synthetic_batch(
        spec, config.batch_size, spec.context_length, device=device, generator=gen
    )
    module = wrap(model) if wrap else model
    params = [p for p in module.parameters() if p.requires_grad]
    opt = plant.optimizer(params)
    scaler = (
        torch.amp.GradScaler(device.type) if config.precision == "fp16" and device.type == "cuda" else None
    )
    fn = torch.compile(module) if config.compile else module
    next_batch = plant.batches(x, y, device)
    loss_of = plant.loss(workloads.loss_fn, params)
    module.train()

    def say(i: int, phase: str) -> None:
        if mark is not None:
            mark(i, phase)

    def forward(i: int) -> Any:
        """The loss of step i (the logits freed on return, as the step without a plant frees them)."""
        xb, yb = x, y
        if next_batch is not None:
            with nvtx_ranges.nvtx_range(DATA):
                xb, yb = next_batch()
        with autocast(device, config.precision):
            logits = fn(xb)
            loss = loss_of(logits, yb, i)
        plant.after_loss(logits, loss)
        return loss

    def step(i: int, clock: PhaseClock, _: Any) -> None:
        say(i, FORWARD)
        with module.no_sync() if allreduce else contextlib.nullcontext():
            with clock.phase(FORWARD, i):
                loss = forward(i)
            say(i, BACKWARD)
            with clock.phase(BACKWARD, i):
                (scaler.scale(loss) if scaler else loss).backward()
        if allreduce is not None:
            say(i, ALLREDUCE)
            with clock.phase(ALLREDUCE, i):
                allreduce(params)
        say(i, OPTIMIZER)
        with clock.phase(OPTIMIZER, i):
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)

    return Body(step, context=plant.context(device))


def _forward(config: RunConfig, spec: Any, model: Any, device: Any) -> Body:
    import torch

    gen = torch.Generator().manual_seed(config.seed)
    x, _ = workloads.synthetic_batch(
        spec, config.batch_size, spec.context_length, device=device, generator=gen
    )
    fn = torch.compile(model) if config.compile else model
    model.eval()

    def step(i: int, clock: PhaseClock, _: Any) -> None:
        with clock.phase("forward", i), autocast(device, config.precision):
            fn(x)

    return Body(step, context=torch.no_grad())


def _generate(config: RunConfig, spec: Any, model: Any, device: Any) -> Body:
    """Prefill a prompt, then decode `new_tokens` tokens one at a time (harness.execution.generate)."""
    return generate_body(config, spec, model, device, prompt_length(config, spec))


BODIES: dict[str, Callable[[RunConfig, Any, Any, Any], Body]] = {
    "train": train_body,
    "forward": _forward,
    "generate": _generate,
}


def _throughput(config: RunConfig, spec: Any, result: RunResult, figures: dict[str, Any]) -> None:
    """tokens/s, analytic FLOPs per step, achieved FLOP/s and MFU (where the device's peak is known);
    generate's serving figures (harness.execution.generate.serving_figures, with the body's `figures`)."""
    import statistics

    measured = [sum(s.phases.values()) for s in result.steps if not s.warmup]
    if not measured or result.model is None:
        return
    step_ns = statistics.fmean(measured)
    b = config.batch_size
    if config.mode == "generate":
        p = result.model.context_length
        n = config.new_tokens
        per_step = flops.forward_flops(spec, b, p) + sum(
            flops.decode_flops(spec, b, p + k + 1) for k in range(n - 1)
        )
        result.tokens_per_s = b * n / (step_ns / 1e9)
        serving = serving_figures(result, figures)
        if serving is not None:
            result.extra["serving"] = serving
    else:
        t = spec.context_length
        per_step = (flops.train_flops if config.mode == "train" else flops.forward_flops)(spec, b, t)
        result.tokens_per_s = b * t / (step_ns / 1e9)
    result.flops_per_step = float(per_step)
    result.achieved_flops = per_step / (step_ns / 1e9)
    device_peak = peak.peak_flops(result.device_name, config.precision) if result.device == "cuda" else None
    if device_peak:
        result.mfu = result.achieved_flops / device_peak
