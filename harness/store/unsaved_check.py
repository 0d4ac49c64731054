"""What a harness-unsaved-RUN.json may hold before `harness import` stores it: every field as `harness run`
(or `profile`, `sweep`, `overhead`) writes it, checked, or the file is refused with the field named.

The file is outside text: a copy can be edited, cut or made up. An edited phase of NaN, `"fast"`, 1e300 or
-5 was stored (and then broke `diff`), a status `weird` and a run id `../../etc/evil\\x1b[31m` were taken.
Here a time is a whole number of nanoseconds from 0 to 2**62, a count a whole number in its range, a
figure a finite number, a status, mode or precision one the harness writes, and a run id a name (no
folder separators, no control or format characters, at most 255 bytes: it becomes a file name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from harness.core.bounds import INT64_MAX, RANK_TIMEOUT_MAX
from harness.core.devices import DEVICES as ASKED_DEVICES
from harness.core.machine import MachineLoad
from harness.core.records import (
    CAPTURE_RANGE,
    FILE_SUFFIXES,
    NSYS_MODES,
    PROGRAM_MODE,
    BlockRecord,
    ModelInfo,
    RunConfig,
    RunResult,
    StepRecord,
    config_phases,
    newest_back,
    phases_of,
)
from harness.store.fields import (
    MAX_NS,
    duration,
    fail,
    figure,
    known_keys,
    mapping,
    objects,
    one_of,
    only,
    run_id,
    text,
    whole,
)
from workloads.names import ATTENTIONS, ENERGY_METHODS, MODES, PRECISIONS, RUN_ENERGY_FIELDS
from workloads.plants import catalogue
from workloads.specs import MODEL_NAMES

STATUSES = ("ok", "degraded", "oom", "error", "interrupted")  # degraded: stored with its reason
DEVICES = (*ASKED_DEVICES, "n/a")  # asked for (config.device); n/a: a program's run
ENERGY_WORDS = ("scope", "device", "method")  # the energy table's fields of text; the others are figures
# what a run holds only until it is stored, and so no file holds: each refused, with why
UNWRITTEN = {
    "power_samples": "the power samples are made into the energy table before a run is written, and dropped",
    "token_timings": "a run's token times are its steps' (steps[].tokens), put beside its figures as it is "
    "stored",
}
# what harness.store.unsaved.write puts in a file, and in its `save`
FILE_FIELDS = ("format", "version", "why", "created_at", "save", "agreement", "result")
SAVE_FIELDS = (
    "profiler", "nsys_mode", "experiment", "baseline_run_id", "nsys_rep", "nsys_sqlite", "artifacts",
)  # fmt: skip
# what a run keeps in `extra` (stored as its summary): capture.finish's phase figures, first step and energy,
# the power notes, --memory, the machine's load, torch.compile's counters, generate's serving figures,
# optimize's part, a program's command, exit code and capture range, a run across ranks; and the serving
# figures generate kept beside them before `serving` held them
EXTRA_FIELDS = (
    "phases", "first_step_ns", "first_step_phases", "compile_ns", "compile_phases_ns", "steady_phases_ns",
    "energy", "energy_summary", "power_notes", "memory", "artifacts", "machine", "inductor_cache", "dynamo",
    "serving", "optimize", "command", "exit_code", CAPTURE_RANGE, "ranks", "world_size", "failed_rank",
)  # fmt: skip
OLD_SERVING = ("ttft_ns", "per_token_ns", "decode_tokens_per_s")
# harness.core.env.collect's fields, and a program's run's (harness.experiments.program)
ENV_FIELDS = (
    "harness", "git_commit", "host", "platform", "python", "torch", "cuda", "nvtx_emitter", "cpu_threads",
    "device_name", "cudnn", "driver", "nsys",
)  # fmt: skip
# its whole numbers (torch's threads, cuDNN's version) and their least value; the others are text
ENV_COUNTS = {"cpu_threads": 1, "cudnn": 0}
ENV_UNKNOWN = ("git_commit", "cuda", "cudnn", "driver")  # null where the machine has none (no git, no GPU)
# what `harness run` writes true or false in a run's configuration
SWITCHES = ("compile", "cuda_graphs", "nvtx_detail", "power", "memory", "pin_memory", "dynamic_shapes")
SIGNALS = 64  # a program killed by signal N exits -N (SIGRTMAX is 64)
OPTIMIZE_ROLES = ("timed", "capture")  # harness.experiments.optimize's parts of a run
OPTIMIZE_FINAL = "final"  # its check of the changes kept, stacked, against the baseline


def result_fields(value: Any) -> dict[str, Any]:
    """The file's `result` object, its fields and those of its parts the ones a RunResult has."""
    result = mapping(value, "result")
    known_keys(result, RunResult, "result")
    missing = [name for name in ("run_id", "config", "status") if name not in result]
    if missing:
        raise fail("result", f"lacks {', '.join(missing)}")
    known_keys(mapping(result["config"], "config"), RunConfig, "config")
    if result.get("model") is not None:
        known_keys(mapping(result["model"], "model"), ModelInfo, "model")
    for name, cls in (("steps", StepRecord), ("blocks", BlockRecord)):
        items = result.get(name, [])
        if not isinstance(items, list):
            raise fail(name, f"is {type(items).__name__}, not a list")
        for i, item in enumerate(items):
            known_keys(mapping(item, f"{name}[{i}]"), cls, f"{name}[{i}]")
    return result


def check_config(cfg: RunConfig, *, stored: bool = False) -> None:
    """Each field of a run's configuration as `harness run` (or `profile`) writes it: a name one the harness
    has, a count whole and within the bounds its option takes, a switch true or false. A `stored` run's
    model and plant are text, not held to this harness's catalogue: a newer harness's database, with a
    model or plant added since, is read as it is (its other fields of a newer harness are passed over)."""
    program = cfg.mode == PROGRAM_MODE
    one_of(cfg.mode, (*MODES, PROGRAM_MODE), "config.mode")
    if stored:
        text(cfg.model, "config.model", plain=True)
    else:
        run_id(cfg.model, "config.model")
    if not program and not stored:  # a program's run is named by its program
        one_of(cfg.model, MODEL_NAMES, "config.model")
    one_of(cfg.device, DEVICES, "config.device")
    one_of(cfg.precision, (*PRECISIONS, "n/a") if program else PRECISIONS, "config.precision")
    one_of(cfg.attention, (*ATTENTIONS, "n/a") if program else ATTENTIONS, "config.attention")
    for name in SWITCHES:
        if type(getattr(cfg, name)) is not bool:
            raise fail(f"config.{name}", f"is {getattr(cfg, name)!r}, not true or false")
    first = 0 if program else 1
    whole(cfg.batch_size, "config.batch_size", first)
    whole(cfg.steps, "config.steps", first)
    whole(cfg.warmup, "config.warmup")
    whole(cfg.seed, "config.seed", -(2**63))
    whole(cfg.new_tokens, "config.new_tokens", 1)
    whole(cfg.power_period_ms, "config.power_period_ms", 1)
    whole(cfg.nproc, "config.nproc", 1)
    whole(cfg.nnodes, "config.nnodes", 1)
    whole(cfg.node_rank, "config.node_rank", 0, cfg.nnodes - 1)
    whole(cfg.delay_ms, "config.delay_ms")
    for name in ("context_length", "vocab_size"):
        if getattr(cfg, name) is not None:
            whole(getattr(cfg, name), f"config.{name}", 1)
    if cfg.delay_rank is not None:
        whole(cfg.delay_rank, "config.delay_rank", 0, cfg.world_size - 1)
    text(cfg.rdzv_endpoint, "config.rdzv_endpoint", optional=True, plain=True)
    if cfg.plant is not None:
        if stored:
            text(cfg.plant, "config.plant", plain=True)
        else:
            one_of(cfg.plant, catalogue.NAMES, "config.plant")
    one_of(cfg.optimizer, catalogue.OPTIMIZERS, "config.optimizer")
    whole(cfg.loader_workers, "config.loader_workers", 0, catalogue.MAX_LOADER_WORKERS)
    whole(cfg.loss_every, "config.loss_every", 1)
    if not isinstance(cfg.fixes, list) or any(
        not isinstance(f, str) or f not in catalogue.FIXES for f in cfg.fixes
    ):
        raise fail("config.fixes", f"is {cfg.fixes!r}, not a list of the catalogue's fixes")
    if not 0 < figure(cfg.rank_timeout, "config.rank_timeout") <= RANK_TIMEOUT_MAX:
        raise fail("config.rank_timeout", f"is {cfg.rank_timeout!r}, not a time --rank-timeout takes")


def named_run(value: Any) -> str:
    """A run's id, as run_id, that every command taking a run can name: not `latest` or -N (the newest
    runs), no comma (`diff A1,A2`, `--runs`), no profiler file's suffix (a file to `diff` and `advise`)."""
    name = run_id(value)
    assert name is not None
    if newest_back(name) is not None:
        raise fail(
            "run_id", f"is {name!r}: `harness show` and the others read it as the newest run (or -N back)"
        )
    if "," in name:
        raise fail("run_id", f"is {name!r}: it holds ',' (`diff A1,A2` and --runs read it as more than one)")
    if name.endswith(FILE_SUFFIXES):
        raise fail("run_id", f"is {name!r}: it ends as a profiler's file ({', '.join(FILE_SUFFIXES)})")
    return name


def check_result(result: RunResult) -> None:
    named_run(result.run_id)
    check_config(result.config)
    one_of(result.status, STATUSES, "status")
    text(result.device, "device", plain=True)
    text(result.device_name, "device_name", plain=True)
    text(result.error, "error", optional=True, column=True)
    if result.model is not None:
        for f in fields(result.model):
            value = getattr(result.model, f.name)
            if f.name == "family":
                text(value, "model.family", plain=True)
            else:
                whole(value, f"model.{f.name}", 0 if f.name == "params" else 1)
    check_steps(result)
    phases = phases_of(result)
    for i, b in enumerate(result.blocks):
        where = f"blocks[{i}]"
        whole(b.step, f"{where}.step")
        if b.layer is not None:
            whole(b.layer, f"{where}.layer")
        text(b.block, f"{where}.block", plain=True)
        one_of(b.phase, phases, f"{where}.phase")
        duration(b.duration_ns, f"{where}.duration_ns")
        whole(b.calls, f"{where}.calls", 1)
    for name in ("tokens_per_s", "flops_per_step", "achieved_flops", "mfu"):
        figure(getattr(result, name), name)
    if result.peak_memory_bytes is not None:
        whole(result.peak_memory_bytes, "peak_memory_bytes")
    extra = mapping(result.extra, "extra")
    check_env(mapping(result.env, "env"))
    energy = mapping(extra.get("energy_summary") or {}, "extra.energy_summary")
    for name in RUN_ENERGY_FIELDS:
        value = energy.get(name)
        if name == "energy_method":
            if value is not None:
                one_of(value, ENERGY_METHODS, f"extra.energy_summary.{name}")
        else:
            figure(value, f"extra.energy_summary.{name}")
    for kind, path in mapping(extra.get("artifacts") or {}, "extra.artifacts").items():
        text(kind, "extra.artifacts: kind", plain=True)
        text(path, f"extra.artifacts.{kind}")
    check_serving(mapping(extra.get("serving") or {}, "extra.serving"))
    for name, why in UNWRITTEN.items():
        if name in extra:
            raise fail(f"extra.{name}", f"is in the file: {why}")
    only(extra, (*EXTRA_FIELDS, *OLD_SERVING), "extra")
    for name in OLD_SERVING:
        figure(extra.get(name), f"extra.{name}")
    check_extra(extra, phases, power=result.config.power)


def check_env(env: dict[str, Any]) -> None:
    """The environment the run happened in (harness.core.env.collect, a program's run's): its fields,
    each text or a whole number as written (`show` lists them)."""
    only(env, ENV_FIELDS, "env")
    for name, value in env.items():
        if value is None and name in ENV_UNKNOWN:
            continue
        if name in ENV_COUNTS:
            whole(value, f"env.{name}", ENV_COUNTS[name])
        else:
            text(value, f"env.{name}", plain=True)


def _numbers(value: Any, where: str, check: Any) -> dict[str, Any]:
    """An object of numbers by name, each checked by `check(number, where)`."""
    for name, number in mapping(value, where).items():
        check(number, f"{where}.{name}")
    return value


def check_extra(extra: dict[str, Any], phases: tuple[str, ...], *, power: bool, low: int = 0) -> None:
    """The figures `show`, `runs`, `compare-compile` and the dashboard read from `extra` (the first step and
    compilation of harness.profilers.capture.finish, the memory of harness.execution.memory, the energy
    table and power notes of harness.energy.run, the machine's load): each as `harness run` writes it, or a
    stored copy breaks those commands with a traceback. A field it lacks is a run that did not record it (a
    run from before it was recorded), not a damaged one. `low`: the least first step (a stored run's is
    read as saved, whatever its steps)."""
    signed = (-MAX_NS, MAX_NS)  # a compile time is the first step less the median: it may be below 0
    if "first_step_ns" in extra:
        whole(extra["first_step_ns"], "extra.first_step_ns", low, MAX_NS)
    elif "compile_ns" in extra:
        raise fail("extra", "holds compile_ns without first_step_ns (the first step it is taken from)")
    if "compile_ns" in extra:
        whole(extra["compile_ns"], "extra.compile_ns", *signed)
    for name in ("first_step_phases", "compile_phases_ns"):
        if extra.get(name) is not None:
            for phase, ns in mapping(extra[name], f"extra.{name}").items():
                one_of(phase, phases, f"extra.{name}: phase")
                bounds = signed if name == "compile_phases_ns" else (low, MAX_NS)
                whole(ns, f"extra.{name}.{phase}", *bounds)
    if extra.get("steady_phases_ns") is not None:
        _numbers(extra["steady_phases_ns"], "extra.steady_phases_ns", figure)
    if extra.get("inductor_cache") is not None:
        cache = mapping(extra["inductor_cache"], "extra.inductor_cache")
        for name in ("hits", "misses"):
            if name in cache:
                whole(cache[name], f"extra.inductor_cache.{name}")
        text(cache.get("state"), "extra.inductor_cache.state", optional=True, plain=True)
    if extra.get("dynamo") is not None:
        _numbers(extra["dynamo"], "extra.dynamo", whole)
    if extra.get("memory") is not None:
        check_memory(mapping(extra["memory"], "extra.memory"))
    if extra.get("machine") is not None:
        check_machine(mapping(extra["machine"], "extra.machine"))
    check_energy(extra, power)
    check_program(extra)
    check_parts(extra)


def check_program(extra: dict[str, Any]) -> None:
    """A program's command (its arguments, each text; `show` prints them joined as a shell line, escaped)
    and its exit code as nsys gives it: 0..255, or -N for a signal; nsys's capture range as given (text)."""
    if "command" in extra:
        command = extra["command"]
        if not isinstance(command, list) or not command:
            raise fail("extra.command", f"is {command!r}, not a list of arguments")
        for i, arg in enumerate(command):
            text(arg, f"extra.command[{i}]")
    if extra.get("exit_code") is not None:
        whole(extra["exit_code"], "extra.exit_code", -SIGNALS, 255)
    text(extra.get(CAPTURE_RANGE), f"extra.{CAPTURE_RANGE}", optional=True, plain=True)


def check_parts(extra: dict[str, Any]) -> None:
    """A run's part in `harness optimize` (role, the fixes its configuration stacks, the change it tries,
    the verdict so far: the dashboard's waterfall reads them) and, across ranks, how each rank ended."""
    if extra.get("optimize") is not None:
        part = mapping(extra["optimize"], "extra.optimize")
        if unknown := sorted(set(part) - {"role", "stack", "change", "verdict"}):
            raise fail("extra.optimize", f"holds fields the harness does not write: {', '.join(unknown)}")
        one_of(part.get("role"), OPTIMIZE_ROLES, "extra.optimize.role")
        stack = part.get("stack")
        if not isinstance(stack, list) or any(f not in catalogue.FIXES for f in stack):
            raise fail("extra.optimize.stack", f"is {stack!r}, not a list of the catalogue's fixes")
        if part.get("change") is not None:
            one_of(part["change"], (*catalogue.FIXES, OPTIMIZE_FINAL), "extra.optimize.change")
        text(part.get("verdict"), "extra.optimize.verdict", optional=True, plain=True)
    for name, low in (("world_size", 1), ("failed_rank", 0)):
        if extra.get(name) is not None:
            whole(extra[name], f"extra.{name}", low)
    if (ranks := extra.get("ranks")) is not None:
        for where, rank in objects(ranks, "extra.ranks"):
            whole(rank.get("rank"), f"{where}.rank")
            one_of(rank.get("status"), STATUSES, f"{where}.status")
            text(rank.get("error"), f"{where}.error", optional=True)


def check_machine(load: dict[str, Any]) -> None:
    """The machine's load while the run ran (harness.core.machine.MachineLoad), as `show` reads it back."""
    known_keys(load, MachineLoad, "extra.machine")
    whole(load["cpus"], "extra.machine.cpus", 1)
    for name in ("seconds", "load_before", "load_after", "others_share", "own_share"):
        if figure(load[name], f"extra.machine.{name}") is None and not name.endswith("_share"):
            raise fail(f"extra.machine.{name}", "is missing (null)")


def check_energy(extra: dict[str, Any], power: bool) -> None:
    """--power's energy table (records of analysis.runs.energy's columns: its words text, every other field
    a finite number or null) and its notes (lines of text); a run whose configuration did not ask for power
    (`power` false) was never sampled: energy in its file is of the file's making, and refused."""
    if not power:
        for name in ("energy", "energy_summary", "power_notes"):
            if extra.get(name):
                raise fail(
                    f"extra.{name}",
                    "is in the file, but the run did not ask for power (config.power is "
                    "false): it was never sampled",
                )
    if (rows := extra.get("energy")) is not None:
        for at, row in objects(rows, "extra.energy"):
            for name, value in row.items():
                where = f"{at}.{name}"
                if name in ENERGY_WORDS:
                    text(value, where, optional=True, plain=True)
                else:
                    figure(value, where, negative=True)
    notes = extra.get("power_notes")
    if notes is not None:
        if not isinstance(notes, list):
            raise fail("extra.power_notes", f"is {type(notes).__name__}, not a list")
        for i, note in enumerate(notes):
            text(note, f"extra.power_notes[{i}]", plain=True)


def check_memory(memory: dict[str, Any]) -> None:
    """A run's memory (harness.execution.memory): peaks in bytes, the analytic breakdown, the operators
    --memory recorded, and its words (where the peak came from, an error, the snapshot's path)."""
    for name in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes"):
        if memory.get(name) is not None:
            whole(memory[name], f"extra.memory.{name}")
    for name in ("peak_source", "recorded", "error", "snapshot"):
        text(memory.get(name), f"extra.memory.{name}", optional=True, plain=name != "snapshot")
    if memory.get("breakdown") is not None:
        _numbers(memory["breakdown"], "extra.memory.breakdown", figure)
    if (operators := memory.get("operators")) is not None:
        for where, row in objects(operators, "extra.memory.operators"):
            text(row.get("name"), f"{where}.name", plain=True)
            whole(row.get("calls"), f"{where}.calls")
            for name in ("self_cpu_memory_bytes", "cpu_memory_bytes"):  # frees count below 0
                whole(row.get(name), f"{where}.{name}", -INT64_MAX)


def check_serving(serving: dict[str, Any]) -> None:
    """generate's serving figures (harness.execution.generate.serving_figures): numbers, the statistics
    of TTFT and TPOT numbers too, and the decode path a line of plain text."""
    for name, value in serving.items():
        where = f"extra.serving.{name}"
        if name == "decode":
            text(value, where, plain=True)
        elif isinstance(value, dict):
            for key, number in value.items():
                figure(number, f"{where}.{key}")
        else:
            figure(value, where)


def check_steps(result: RunResult) -> None:
    """Each step as the step loop records it: once per rank (a step timed twice would count twice), with
    every phase of its mode (a step without one is another measurement: `diff` would set its sum against
    whole steps); a run that ended ok (or degraded, which is ok with its capture's checks failed) has
    measured steps, but for a program's, which has none."""
    cfg = result.config
    if cfg.mode == PROGRAM_MODE and result.steps:
        raise fail("steps", f"hold {len(result.steps)}: a program's run (`profile -- CMD`) times no steps")
    phases = config_phases(cfg)
    seen: dict[tuple[int, int], int] = {}
    for i, s in enumerate(result.steps):
        where = f"steps[{i}]"
        whole(s.step, f"{where}.step")
        whole(s.rank, f"{where}.rank", 0, cfg.world_size - 1)
        if type(s.warmup) is not bool:
            raise fail(f"{where}.warmup", f"is {s.warmup!r}, not true or false")
        for phase, ns in mapping(s.phases, f"{where}.phases").items():
            one_of(phase, phases, f"{where}.phases: phase")
            duration(ns, f"{where}.phases.{phase}")
        missing = [p for p in phases if p not in s.phases]
        if missing:
            raise fail(
                f"{where}.phases", f"lacks {', '.join(missing)}: a {cfg.mode} step times {', '.join(phases)}"
            )
        for phase, at in mapping(s.starts, f"{where}.starts").items():
            one_of(phase, phases, f"{where}.starts: phase")
            whole(at, f"{where}.starts.{phase}")
        if not isinstance(s.tokens, list):
            raise fail(f"{where}.tokens", f"is {type(s.tokens).__name__}, not a list")
        if len(s.tokens) > cfg.new_tokens:
            raise fail(f"{where}.tokens", f"holds {len(s.tokens)} tokens, more than the run decodes")
        for j, ns in enumerate(s.tokens):
            duration(ns, f"{where}.tokens[{j}]")
        first = seen.setdefault((s.step, s.rank), i)
        if first != i:
            rank = f" of rank {s.rank}" if cfg.world_size > 1 else ""
            raise fail(f"{where}.step", f"is {s.step}{rank}, as steps[{first}]: a step is recorded once")
    ended_ok = result.status in ("ok", "degraded") and cfg.mode != PROGRAM_MODE
    if ended_ok and all(s.warmup for s in result.steps):
        raise fail("steps", f"hold no measured step, but the run's status is {result.status}")


def check_save(save: dict[str, Any], profilers: Sequence[str]) -> None:
    """What the run is stored with; its profiler one of `profilers` (harness.profilers.registry's names: the
    store, below the profilers, is told them)."""
    only(save, SAVE_FIELDS, "save")
    one_of(save.get("profiler") or "none", tuple(profilers), "save.profiler")
    if save.get("nsys_mode") is not None:
        one_of(save["nsys_mode"], NSYS_MODES, "save.nsys_mode")
    text(save.get("experiment"), "save.experiment", optional=True, plain=True)
    run_id(save.get("baseline_run_id"), "save.baseline_run_id", optional=True)
    for name in ("nsys_rep", "nsys_sqlite"):
        text(save.get(name), f"save.{name}", optional=True, column=True)
    for kind, path in mapping(save.get("artifacts") or {}, "save.artifacts").items():
        text(kind, "save.artifacts: kind", plain=True)
        text(path, f"save.artifacts.{kind}")


def check_agreement(
    rows: Any, phases: tuple[str, ...], columns: tuple[str, ...]
) -> list[dict[str, Any]] | None:
    """The agreement rows: their `columns` (phase, steps, then figures: times in ns, the relative
    difference of any sign), every figure finite (the database holds no NULL there)."""
    if rows is None:
        return None
    for where, row in objects(rows, "agreement"):
        if set(row) != set(columns):
            raise fail(where, f"has fields {sorted(row)}, not {list(columns)}")
        one_of(row["phase"], phases, f"{where}.phase")
        whole(row["steps"], f"{where}.steps")
        for name in columns[2:]:
            value = row[name]
            if figure(value, f"{where}.{name}", negative=name == "rel_diff") is None:
                raise fail(f"{where}.{name}", "is missing (null)")
            if name != "rel_diff" and value > MAX_NS:
                raise fail(f"{where}.{name}", f"is {value}, past {MAX_NS} ns")
    return rows


def created(value: Any) -> datetime:
    """The creation time, in UTC (the database keeps no offset: one of another zone was stored as UTC,
    hours off); a time without a zone is UTC, as the store reads it."""
    if not isinstance(value, str):
        raise fail("created_at", f"is {value!r}, not a date")
    try:
        when = datetime.fromisoformat(value)
        return when.astimezone(UTC) if when.tzinfo is not None else when
    except ValueError:
        raise fail("created_at", f"is {value!r}, not an ISO date") from None
    except OverflowError:
        raise fail("created_at", f"is {value!r}, outside the years 1 to 9999 in UTC") from None
