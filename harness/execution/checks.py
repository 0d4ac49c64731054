"""A configuration checked once, before any work, at one place: what a user could have typed wrong
(`validate`), a rank layout torchrun would refuse (`check_layout`), what the device it resolves to cannot
run (`check_device`), a count the database cannot store. `checked` makes them all and resolves the device
once; every later layer (the profilers, the ranks, the worker) trusts a configuration that passed."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import workloads
from harness.core.bounds import RANK_TIMEOUT_MAX, check_ranks, check_storable, hidden
from harness.core.devices import device_memory_bytes, emulated_precision_note, resolve_device
from harness.core.errors import UsageError
from harness.core.records import RunConfig
from harness.execution import memory
from harness.execution.generate import prompt_length
from workloads.names import ATTENTIONS, MODES, PRECISIONS
from workloads.plants import catalogue


@dataclass(frozen=True)
class Checked:
    """A configuration that passed every check, the device it runs on (torch.device), and what to warn of
    before it runs (bf16 emulated on this CPU)."""

    config: RunConfig
    device: Any
    warnings: list[str] = field(default_factory=list)


def checked(config: RunConfig) -> Checked:
    """`config` checked whole (UsageError for the first thing wrong), its device resolved once."""
    check_storable(config)  # a count the database cannot store would lose the run
    validate(config)
    check_layout(config)
    device = resolve_device(config.device)
    check_device(config, device.type)
    spec = run_spec(config)
    context = prompt_length(config, spec) if config.mode == "generate" else spec.context_length
    notes = [
        emulated_precision_note(device, [config.precision], backward=config.mode == "train"),
        memory.over_memory(config, spec, context, device.type, device_memory_bytes(device)),
    ]
    return Checked(config, device, [n for n in notes if n])


def run_spec(config: RunConfig) -> workloads.ModelSpec:
    """The model a run of `config` builds: its size with --vocab-size and, but in generate (whose
    --context-length is its prompt), --context-length."""
    spec = workloads.get_spec(config.model)
    context = config.context_length if config.mode != "generate" else None
    return spec.with_overrides(vocab_size=config.vocab_size, context_length=context)


def known_model(model: str) -> workloads.ModelSpec:
    """The spec of a model named on the command line; UsageError for a name no model has."""
    if model not in workloads.MODEL_NAMES:
        raise UsageError(f"unknown model {model!r}; known models: {', '.join(workloads.MODEL_NAMES)}")
    return workloads.get_spec(model)


def check_positive(counts: dict[str, int | float | None]) -> None:
    """UsageError for the first count (by its option) that is 0 or less; None is not given."""
    for name, value in counts.items():
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be a positive number, got {value}")


def check_positions(model: str, spec: Any, context_length: int | None) -> None:
    """UsageError where a context is longer than the positions a GPT-2 model learned."""
    if spec.family == "gpt2" and context_length and context_length > spec.context_length:
        raise UsageError(
            f"{model} has learned positions for {spec.context_length} tokens; "
            f"--context-length {context_length} is more"
        )


def validate(config: RunConfig) -> None:
    """Raise UsageError for anything a user could have typed wrong, before any work starts."""
    spec = known_model(config.model)
    for name, allowed in (("mode", MODES), ("precision", PRECISIONS), ("attention", ATTENTIONS)):
        value = getattr(config, name)
        if value not in allowed:
            raise UsageError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
    check_positive({
        "--batch-size": config.batch_size,
        "--steps": config.steps,
        "--context-length": config.context_length,
        "--vocab-size": config.vocab_size,
        "--new-tokens": config.new_tokens if config.mode == "generate" else 1,
        "--power-period": config.power_period_ms if config.power else 1,
    })  # fmt: skip
    if config.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {config.warmup}")
    if config.cuda_graphs:
        _check_graphs(config)
    if config.mode == "generate" and config.new_tokens == 1 and (config.cuda_graphs or config.compile):
        flag, done = ("--cuda-graphs", "replayed") if config.cuda_graphs else ("--compile", "compiled")
        raise UsageError(
            f"{flag} applies to generate's decode step, and --new-tokens 1 decodes no token (the first is "
            f"prefill's, eager on every path): nothing would be {done}; leave {flag} out or decode 2 or more"
        )
    if config.mode == "generate":
        check_generate_length(config, spec)
    else:
        check_positions(config.model, spec, config.context_length)
    if why := catalogue.unknown(config.plant):
        raise UsageError(why)
    if config.optimizer not in catalogue.OPTIMIZERS:
        raise UsageError(
            f"unknown optimizer {config.optimizer!r}; choose one of {', '.join(catalogue.OPTIMIZERS)}"
        )
    if config.loader_workers < 0:
        raise UsageError(f"--loader-workers must be 0 or more, got {config.loader_workers}")
    if (workers := config.loader_workers) > catalogue.MAX_LOADER_WORKERS:  # each a process
        raise UsageError(f"--loader-workers must be {catalogue.MAX_LOADER_WORKERS} or less, got {workers}")
    if config.loss_every <= 0:
        raise UsageError(f"--loss-every must be a positive number of steps, got {config.loss_every}")
    unknown_fixes = [f for f in config.fixes if f not in catalogue.FIXES]
    if unknown_fixes:
        raise UsageError(f"unknown fix {unknown_fixes[0]!r}; known fixes: {', '.join(catalogue.FIXES)}")
    if config.plant is not None and config.mode != "train":
        raise UsageError(
            f"--plant plants a cause in the train step: it needs --mode train, not {config.mode}"
        )


def check_generate_length(config: RunConfig, spec: Any) -> None:
    """UsageError where generate's prompt and new tokens are more positions than the model holds: its
    context length, learned positions for GPT-2, the length it is built for with RoPE (generate builds the
    model as named; --context-length is the prompt there, not a new length). Past it the KV cache and the
    prefill grow without a bound: a prompt of 100000 tokens on tiny took ~10 GB and ran for many minutes.
    The positions taken are the prompt's and every new token's but the last, which is never fed back
    (`workloads.memory.kv_positions`)."""
    prompt = prompt_length(config, spec)
    if workloads.memory.kv_positions(prompt, config.new_tokens) <= spec.context_length:
        return
    holds = "has learned positions for" if spec.family == "gpt2" else "holds a context of"
    raise UsageError(
        f"{config.model} {holds} {spec.context_length} tokens; prompt {prompt} + {config.new_tokens} new "
        f"tokens is more: lower --context-length or --new-tokens"
    )


def check_device(config: RunConfig, device_type: str) -> None:
    """UsageError where the configuration cannot run on the device it resolved to (a GPU cause planted on
    the CPU, CUDA graphs off CUDA)."""
    if config.cuda_graphs and device_type != "cuda":
        raise UsageError(f"--cuda-graphs needs a CUDA device; this run is on {device_type} (--device cuda)")
    refused = catalogue.refusal(config.plant, device_type)
    if refused:
        raise UsageError(refused)


def _check_graphs(config: RunConfig) -> None:
    """--cuda-graphs: generate, without what a replayed graph cannot do (its device: `check_device`)."""
    if config.mode != "generate":
        raise UsageError(f"--cuda-graphs replays generate's decode step; --mode {config.mode} has none")
    if config.compile:
        raise UsageError(
            "--cuda-graphs and --compile both decode from a static KV cache (--compile with "
            "mode=reduce-overhead replays CUDA graphs of its own): choose one"
        )
    if config.nvtx_detail:
        raise UsageError(
            "--nvtx-detail puts ranges (and timers) in Python hooks, which a replayed CUDA graph does not "
            "run: leave it out with --cuda-graphs"
        )


def check_layout(config: RunConfig) -> None:
    """Raise UsageError for a rank layout torchrun would refuse, or a mode runs across ranks do not time."""

    if config.nproc < 1 or config.nnodes < 1:
        raise UsageError(f"--nproc and --nnodes must be 1 or more, got {config.nproc} and {config.nnodes}")
    check_ranks(config.nproc)
    # checked in a run of one process too (where it changes nothing): it is stored with the run, and a run
    # whose file `harness import` refuses would be lost where the database would not take it
    if not 0 < config.rank_timeout <= RANK_TIMEOUT_MAX:  # NaN fails too
        raise UsageError(
            f"--rank-timeout must be a positive number of seconds, at most {RANK_TIMEOUT_MAX}; "
            f"got {config.rank_timeout:g}"
        )
    if config.rdzv_endpoint is not None and hidden(config.rdzv_endpoint):  # stored too, as the timeout
        raise UsageError(
            f"--rdzv-endpoint {config.rdzv_endpoint!r} is not HOST:PORT: it holds control characters"
        )
    if config.world_size == 1:
        return
    if config.mode != "train":
        raise UsageError(
            f"--nproc times train mode only (DDP's gradient all-reduce), not --mode {config.mode}"
        )
    if not 0 <= config.node_rank < config.nnodes:
        raise UsageError(f"--node-rank must be 0 … {config.nnodes - 1} with --nnodes {config.nnodes}")
    if config.nnodes > 1 and not config.rdzv_endpoint:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the node with --node-rank 0)")
    if config.power:
        raise UsageError("--power is not supported with --nproc yet")
    if config.memory:  # each rank would record (and on CUDA write the same snapshot), none be kept
        raise UsageError("--memory is not supported with --nproc yet")


# an option whose value changes nothing unless the configuration has what it is for; each is checked only
# where the user gave it (a value other than its default): a default left alone is never refused nor warned
KNOB_PLANTS = {
    "loader_workers": ("slow-loader",),
    "loss_every": ("host-sync",),
    "dynamic_shapes": ("recompile",),
    "pin_memory": ("pageable-h2d", "d2h-copy"),
}
NSYS_ONLY = ("nsys_path", "nsys_capture", "nsys_mode", "nsys_arg", "nsys_force", "nsys_baseline")


def flag(name: str) -> str:
    """A configuration field as its option: `loss_every` → `--loss-every` (the baseline given: turned off)."""
    named = {"nsys_baseline": "no_nsys_baseline", "power_period_ms": "power_period"}.get(name, name)
    return "--" + named.replace("_", "-")


def _check_fix_changes(config: RunConfig, fix: str) -> None:
    """UsageError for a --fix whose knobs the plant does not set and the run leaves at their defaults, or
    that the run gives the plant's own values: the run would be stored as fixed while its step is the
    plant's as it is."""
    planted = catalogue.settings(config.plant)
    knobs = catalogue.FIXES[fix].fields if fix in catalogue.FIXES else ()
    defaults = {f.name: f.default for f in fields(RunConfig)}
    if not knobs or any(getattr(config, k) != planted.get(k, defaults.get(k)) for k in knobs):
        return
    said = " and ".join(flag(k) for k in knobs)
    if any(k in planted for k in knobs):
        sets = " and ".join(f"{flag(k)} {planted[k]}" for k in knobs if k in planted)
        same = " and ".join(str(getattr(config, k)) for k in knobs)
        raise UsageError(
            f"--fix {fix} changes nothing here: --plant {config.plant} sets {sets} and this run gives it "
            f"{same} too; give {said} another value, or leave --fix {fix} out"
        )
    if all(getattr(config, k) is False for k in knobs):
        left, give = "leaves it off", f"give {said} too"
    else:  # at its default, whether given so or not: another value is what changes the step
        values = " and ".join(str(getattr(config, k)) for k in knobs)
        left, give = f"has it at {values}, its default", f"give {said} another value"
    raise UsageError(
        f"--fix {fix} changes nothing here: --plant {config.plant} does not set {said} and this run "
        f"{left}; {give}, or leave --fix {fix} out"
    )


def check_effect(config: RunConfig, given: dict[str, Any], device_type: str) -> list[str]:
    """UsageError for an option the user gave (`given`: by configuration field, the value asked for, before
    a plant's settings) that changes nothing in this configuration, where it can only be a mistake; the
    warnings for one that changes nothing here but is kept by a reasonable script (the same line run with
    --nproc 1 and more, or with --device auto on a machine without a GPU)."""
    plant = config.plant or "nothing"
    if given.get("fixes") and config.plant is None:
        raise UsageError("--fix lets a fix change what --plant sets; this run plants nothing: leave it out")
    for fix in config.fixes if given.get("fixes") else ():
        _check_fix_changes(config, fix)
    for name, value in catalogue.settings(config.plant, config.fixes).items():
        if name in given and given[name] != value:
            sets = f"{flag(name)} {value}"
            raise UsageError(f"--plant {config.plant} sets {sets} (the cause it plants): leave it out")
    if "new_tokens" in given and config.mode != "generate":
        raise UsageError(f"--new-tokens counts what generate decodes; --mode {config.mode} decodes nothing")
    if "optimizer" in given and config.mode != "train":
        raise UsageError(f"--optimizer picks AdamW's implementation; --mode {config.mode} runs no optimizer")
    if "power_period_ms" in given and not config.power:
        raise UsageError("--power-period is --power's sampling period: give --power too, or leave it out")
    for name, plants in KNOB_PLANTS.items():
        if name in given and config.plant not in plants:
            raise UsageError(
                f"{flag(name)} changes the step of --plant {' or '.join(plants)}; this run plants {plant}"
            )
    if "node_rank" in given and config.nnodes == 1:
        raise UsageError("--node-rank places this machine among --nnodes machines; with --nnodes 1 it is 0")
    warnings = []
    if "pin_memory" in given and device_type != "cuda":
        line = f"--pin-memory pins copies to a CUDA device; this run is on {device_type}: it changes nothing"
        if config.device != "auto":
            raise UsageError(line)
        warnings.append(line)
    if config.world_size == 1:
        warnings += [
            f"{flag(name)} is for runs across ranks; this run is one process (--nproc 1): it changes nothing"
            for name in ("rdzv_endpoint", "rank_timeout")
            if name in given
        ]
    return warnings


def check_profiler_effect(
    profiler: str | None,
    reads: set[str],
    given: set[str],
    memory: bool,
    device: str = "cuda",
    auto: bool = False,
) -> list[str]:
    """UsageError for a profiler option the user gave (`given`: by parameter name) that the run does not
    use (`reads`: the parameters the profiler's options read): an nsys option without nsys, a profile
    folder with nothing to write there (no profiler, and no --memory or --memory off CUDA, which keeps its
    operator table with the run). The folder on a `--device auto` that landed off CUDA is only warned of (a
    script run on machines with and without a GPU keeps it): the warnings are returned."""
    writes = memory and device == "cuda"  # --memory's snapshot: CUDA's allocator history only
    if profiler is None and not writes:
        reads = reads - {"profile_dir"}
    unread = [name for name in given if name not in reads]
    nsys_given = [flag(name) for name in NSYS_ONLY if name in unread]
    without = f"--profiler {profiler}" if profiler else "no profiler"
    if nsys_given:
        are = "is" if len(nsys_given) == 1 else "are"
        raise UsageError(f"{', '.join(nsys_given)} {are} for nsys; this run has {without}: give --nsys")
    warnings = []
    if "profile_dir" in unread:
        line = "--profile-dir is where a profiler's (or --memory's) files go; this run writes none"
        if memory:
            line += f" (--memory on {device} keeps its operator table with the run)"
        if not (memory and auto):
            raise UsageError(line)
        warnings.append(f"{line}: it changes nothing")
        unread.remove("profile_dir")
    if unread:
        raise UsageError(f"{', '.join(flag(n) for n in sorted(unread))}: not read by {without}")
    return warnings
