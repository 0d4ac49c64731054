"""Tables of runs for people: the benchmark-table shape (size, d_model, …, forward/backward/optimizer), the
figures and tables `run` and `show` add under it (throughput, compile, memory), and `harness blocks RUN`: the
per-block breakdown of a stored --nvtx-detail run, from whatever source it has.

A run without a profiler carries its synchronised block timers (harness.execution.block_timers), stored with
it. A run under a profiler gets its block times from its trace when it is examined (analysis.front.examine),
stored the same way; an older run whose trace is still there is read from the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.compare.agreement import AGREEMENT_TITLE as AGREEMENT_TITLE  # run's table, show's stored one
from analysis.compare.agreement import for_people
from analysis.compare.compile import COMPILE, NOT_COMPILED, NOT_COMPILED_NOTE
from analysis.errors import ExportError
from analysis.front.examine import blocks_of_file
from analysis.runs.steady import REMAINDER, STEP, PhaseStats, phase_stats, step_stats
from analysis.stats import as_nsys_writes as as_nsys_writes  # show's phase table, written as nsys's
from analysis.views.blocks import block_table
from harness.core.errors import HarnessError
from harness.core.nvtx_ranges import block_names
from harness.core.records import PROGRAM_MODE, RunResult, measured_steps, phases_of, stored_phases
from harness.store.blocks import BlockRecords, resolve, stored_blocks, trace_of
from harness.store.unsaved import AGREEMENT_COLUMNS
from workloads.names import BLOCK_TIMERS, MEASURED_STATUSES, PERCENTILE_SAMPLES, counted, percentile

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore
    from harness.store.schema import Run


def agreement_frame(rows: Sequence[Any]) -> pd.DataFrame:
    """A stored run's agreement (its `Agreement` rows) as analysis.compare.agreement's table."""
    import pandas as pd

    return pd.DataFrame([[getattr(a, c) for c in AGREEMENT_COLUMNS] for a in rows], columns=AGREEMENT_COLUMNS)


def stored_agreement(rows: Sequence[Any]) -> pd.DataFrame:
    """A stored run's agreement as `run` writes it (analysis.compare.agreement.for_people)."""
    return for_people(agreement_frame(rows))


def results_table(results: list[RunResult], serving: bool = False, ids: bool = False) -> pd.DataFrame:
    """One row per run: model shape, then the step (its phases summed) and per phase mean and std (ns) of
    the measured steps it finished, and its status as stored: a run interrupted or failed (out of memory
    too) after some measured steps shows theirs, as `harness runs` and `show` do; one that finished none
    keeps NaN. With `serving`, a generate run's serving figures people compare across runs (SERVING_MEANS:
    its TTFT and TPOT means and decode tokens/s, those `show` prints) follow its tokens/s. With `ids`, each
    row's run id (`run`, before its status): a table of several runs (a sweep, repeats) names the runs
    `show` and `diff` take, where one run's table says its id in its title."""
    import pandas as pd

    rows = []
    for r in results:
        m = r.model
        row: dict[str, object] = {
            "size": r.config.model,
            "precision": r.config.precision,
            "compile": r.config.compile,
            "batch": r.config.batch_size,
            "context": m.context_length if m else r.config.context_length,
            "d_model": m.d_model if m else None,
            "d_ff": m.d_ff if m else None,
            "num_layers": m.num_layers if m else None,
            "num_heads": m.num_heads if m else None,
        }
        finished = measured_steps(r)
        stats = {s.phase: s for s in phase_stats(finished, phases_of(r))}
        step = step_stats(finished, phases_of(r))
        if step is not None:
            stats["step"] = step
        for phase in ("step", *phases_of(r)):
            s = stats.get(phase)
            if phase == "step" and s is None and r.status in MEASURED_STATUSES:
                continue  # no step with every phase (a run without steps)
            row[f"{phase} mean (ns)"] = s.mean_ns if s else float("nan")
            row[f"{phase} std (ns)"] = s.std_ns if s else float("nan")
        row["tokens/s"] = r.tokens_per_s if finished and r.tokens_per_s is not None else float("nan")
        if serving and r.config.mode == "generate":
            row.update(serving_means(r.extra.get("serving") or {}))
        if ids:
            row["run"] = r.run_id
        row["status"] = r.status
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:  # counts stay integers where a run has none (an OOM before the model was built)
        for column in ("context", "d_model", "d_ff", "num_layers", "num_heads"):
            df[column] = df[column].astype("Int64")
    # the terminal shows batch and context only where they vary (a batch-size or context-length sweep), and
    # compile only where a run used it; csv and json keep every column, so a script reads the batch size
    alike = [] if df.empty else [c for c in ("batch", "context") if df[c].nunique(dropna=False) == 1]
    if not df.empty and (df["compile"] == False).all():  # noqa: E712 - pandas elementwise
        alike.append("compile")
    df.attrs["terminal_drops"] = alike
    # on a narrow terminal: the phase means and throughput first, the model's shape last; the step's mean
    # before the run ids (a table of ids without one figure of them tells nothing apart)
    means = [c for c in df.columns if c.endswith("mean (ns)") and c not in SERVING_MEANS]
    served = [c for c in SERVING_MEANS if c in df.columns]
    df.attrs["priority"] = [
        "size", *means[:1], "run", "batch", "context", *means, "tokens/s", *served, "status", "precision",
        "compile",
    ]  # fmt: skip
    df.attrs["whole"] = ["run"]  # the id a user copies into `show` and `diff`: never shortened
    df.attrs["settings"] = ["precision", "compile", "batch", "context"]  # shown first where they differ
    return df


def figures(phase: str, durations: list[int]) -> PhaseStats:
    """One phase's figures over its timings, the computation every command shows (analysis.runs.steady)."""
    return PhaseStats.of(phase, durations)


def run_step_stats(run: Run) -> PhaseStats | None:
    """The stored run's step: its measured steps' phases summed, per rank and step."""
    steps: dict[tuple[int, int], dict[str, int]] = {}
    for s in run.step_timings:
        if not s.warmup:
            steps.setdefault((s.rank or 0, s.step), {})[s.phase] = s.duration_ns
    return step_stats(list(steps.values()), stored_phases(run))


RSS_LABEL = "peak RSS (process)"


def peak_label(device: str) -> str:
    """How a run's peak memory is called: the allocator's on CUDA and MPS, the process's RSS on the CPU."""
    return f"{RSS_LABEL} (MiB)" if device == "cpu" else "peak memory (MiB)"


def throughput_table(result: RunResult) -> pd.DataFrame:
    """Mode-specific figures of one run: tokens/s, FLOPs, MFU, memory (generate's serving figures are a
    table of their own: `serving_rows`)."""
    import pandas as pd

    rows: list[tuple[str, object]] = [
        ("parameters", result.model.params if result.model else None),
        ("tokens/s", result.tokens_per_s),
    ]
    rows += [
        # a count (stored as a float): a whole number in csv and json, as the other counts are
        ("FLOPs per step", round(result.flops_per_step) if result.flops_per_step is not None else None),
        ("achieved TFLOP/s", result.achieved_flops / 1e12 if result.achieved_flops else None),
        ("MFU (%)", result.mfu * 100 if result.mfu else None),
        (peak_label(result.device), result.peak_memory_bytes / 2**20 if result.peak_memory_bytes else None),
    ]
    return pd.DataFrame(
        {"metric": [r[0] for r in rows], "value": pd.Series([r[1] for r in rows], dtype=object)}
    )


def extra_tables(
    extra: dict[str, Any], phases: tuple[str, ...], degraded: bool = False
) -> list[tuple[str, pd.DataFrame]]:
    """The tables a run's extra figures give (result.extra, or a stored run's summary): compile time apart
    from the steady state, memory (peaks and the analytic breakdown), and --memory's operator table.
    `degraded`: the run's capture failed its health checks, so what was drawn from it is said untrusted."""
    tables = []
    if extra.get("serving"):
        tables.append((SERVING_TITLE, serving_rows(extra["serving"], degraded)))
    if "compile_ns" in extra:
        tables.append(("compile (first step)", compile_rows(extra, phases)))
    if extra.get("inductor_cache"):
        tables.append(("torch.compile cache (Inductor FX graphs)", cache_rows(extra["inductor_cache"])))
    memory = extra.get("memory") or {}
    if memory:
        tables.append((f"memory (peak: {memory.get('peak_source', '')})", memory_rows(memory)))
    if memory.get("operators"):
        title = "top operators by CPU memory (torch.profiler profile_memory, measured steps)"
        tables.append((title, memory_operator_rows(memory["operators"])))
    return tables


SERVING_TITLE = "serving (measured steps)"


# the statistics of TTFT and TPOT shown (keys `<stat>_ns` of their figures)
TTFT_STATS = ("mean", "p50", "p99")
TPOT_STATS = ("mean", "p50", "p90", "p99")


# the serving figures compared across runs (a sweep's columns): the mean TTFT and TPOT, and decode tokens/s
SERVING_MEANS = ("TTFT mean (ns)", "TPOT mean (ns)", "decode tokens/s")


def serving_means(serving: dict[str, Any]) -> dict[str, float]:
    """SERVING_MEANS of generate's serving figures (harness.execution.generate.serving_figures), NaN where a
    run has none (no measured step; TPOT and decode tokens/s of --new-tokens 1, which decodes no token)."""
    ttft = serving.get("ttft_ns") or {}
    tpot = serving.get("tpot_ns") or {}
    values = (ttft.get("mean_ns"), tpot.get("mean_ns"), serving.get("decode_tokens_per_s"))
    return {name: float("nan") if v is None else v for name, v in zip(SERVING_MEANS, values, strict=True)}


PERCENTILES_LEFT_BLANK = "percentiles left blank"


def unmeasured_percentiles(ttft: dict[str, Any], tpot: dict[str, Any]) -> str | None:
    """Why the serving table leaves a TTFT or TPOT percentile blank: too few samples for it (the measured
    steps, the decoded tokens; workloads.names.PERCENTILE_SAMPLES); None where none is."""
    said = []
    for name, figures, stats, noun in (
        ("TTFT", ttft, TTFT_STATS, "measured step"), ("TPOT", tpot, TPOT_STATS, "token")
    ):  # fmt: skip
        n = figures.get("count")
        blank = [s for s in stats if s != "mean" and n and n < PERCENTILE_SAMPLES[int(s[1:])]]
        if blank:
            said.append(f"{name} {' and '.join(blank)} ({counted(n, noun)})")
    if not said:
        return None
    least = ", ".join(f"p{q} {n}" for q, n in PERCENTILE_SAMPLES.items() if n > 1)
    return f"{', '.join(said)}: too few samples (needed: {least})"


def serving_rows(serving: dict[str, Any], degraded: bool = False) -> pd.DataFrame:
    """generate's serving figures (harness.execution.generate.serving_figures) for people: the decode path,
    the batch as concurrent sequences, time to first token and per output token (mean and percentiles over
    every decoded token; a percentile of too few samples blank, and a row saying why), output and decode
    tokens/s, the KV cache as allocated against the analytic figure, and decode's GPU-busy share where a
    capture gave it."""
    import pandas as pd

    mib = 2**20
    ttft = serving.get("ttft_ns") or {}
    tpot = serving.get("tpot_ns") or {}

    def size(name: str) -> float | None:
        value = serving.get(name)
        return value / mib if value is not None else None

    rows: list[tuple[str, object]] = [
        ("decode", serving.get("decode")),
        ("concurrent sequences (batch)", serving.get("concurrent_sequences")),
        ("output tokens per sequence", serving.get("new_tokens")),
        *[
            (
                f"{name} {stat} (ns)",
                figures.get("mean_ns") if stat == "mean" else percentile(figures, int(stat[1:])),
            )
            for name, figures, stats in (("TTFT", ttft, TTFT_STATS), ("TPOT", tpot, TPOT_STATS))
            for stat in stats
        ],
        ("TPOT tokens timed", tpot.get("count", 0)),  # --new-tokens 1: every token is prefill's
        ("output tokens/s", serving.get("output_tokens_per_s")),
        ("decode tokens/s", serving.get("decode_tokens_per_s")),
        ("KV cache allocated (MiB)", size("kv_cache_bytes")),
        ("KV cache analytic (MiB)", size("kv_cache_analytic_bytes")),
    ]
    if blank := unmeasured_percentiles(ttft, tpot):
        rows.append((PERCENTILES_LEFT_BLANK, blank))
    if serving.get("decode_gpu_busy") is not None:  # drawn from the capture, the timers' figures not
        untrusted = " (untrusted: the capture failed its health checks)" if degraded else ""
        rows.append((f"decode GPU busy (%){untrusted}", serving["decode_gpu_busy"] * 100))
    out = pd.DataFrame(
        {"metric": [r[0] for r in rows], "value": pd.Series([r[1] for r in rows], dtype=object)}
    )
    out.attrs["wrap"] = ["value"]  # the blank percentiles' sentence: wrapped, never cut
    return out


def compile_rows(extra: dict[str, Any], phases: tuple[str, ...]) -> pd.DataFrame:
    """Per phase, the remainder (step − phases) and the whole step: the first step, the measured median
    (analysis.runs.steady's, as harness.profilers.capture.finish stores them) and the difference (compile);
    a phase --compile leaves eager (generate's prefill) has none, and a `note` column says why."""
    import pandas as pd

    first = extra.get("first_step_phases") or {}
    # a phase --compile leaves eager has none (a run stored before that was known has one: not shown)
    uncompiled = [p for p in phases if p in first and p in NOT_COMPILED]
    compile_ns = {p: ns for p, ns in (extra.get("compile_phases_ns") or {}).items() if p not in NOT_COMPILED}
    steady = extra.get("steady_phases_ns") or {}  # runs from before it was stored: first − compile

    def median(phase: str, first_ns: float, compiled: float | None) -> float | None:
        if phase in steady:
            return steady[phase]
        return first_ns - compiled if compiled is not None else None

    present = [p for p in phases if p in first]
    rows = [(p, first[p], median(p, first[p], compile_ns.get(p)), compile_ns.get(p)) for p in present]
    step = extra["first_step_ns"]
    last = (STEP, step, median(STEP, step, extra["compile_ns"]), extra["compile_ns"])
    if len(rows) > 1 and all(r[2] is not None and (r[3] is not None or r[0] in NOT_COMPILED) for r in rows):
        rows.append(
            (
                REMAINDER,
                step - sum(r[1] for r in rows),
                last[2] - sum(r[2] for r in rows),
                None if uncompiled else last[3] - sum(r[3] for r in rows),
            )
        )
    rows.append(last)
    cols = ["phase", "first step (ns)", "steady median (ns)", COMPILE]
    table = pd.DataFrame(rows, columns=cols)
    if uncompiled:  # what the blanks mean, in every format
        whole = f"first step − median, {', '.join(uncompiled)} included"
        said = {p: NOT_COMPILED_NOTE for p in uncompiled} | {
            REMAINDER: "none: it holds the eager phases'",
            STEP: whole,
        }
        table["note"] = [said.get(r[0], "") for r in rows]
    return table


def cache_rows(cache: dict[str, Any]) -> pd.DataFrame:
    """Whether Inductor's FX graph cache was warm for a --compile run (harness.execution.compiled)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "state": cache.get("state"),
                "FX graphs from the cache": cache.get("hits"),
                "FX graphs compiled": cache.get("misses"),
            }
        ]
    )


def memory_rows(memory: dict[str, Any]) -> pd.DataFrame:
    """The allocator's peak allocated / reserved (CUDA, MPS), or on the CPU the process's peak RSS (never
    under an allocator's label: it holds the interpreter and torch too), then the analytic breakdown (MiB)."""
    import pandas as pd

    mib = 2**20
    rss = memory.get("peak_rss_bytes")
    if rss is None and str(memory.get("peak_source", "")).startswith("process peak resident"):
        rss = memory.get("peak_allocated_bytes")  # a CPU run stored before RSS had its own field
    rows: list[tuple[str, object]] = (
        [(RSS_LABEL, rss)]
        if rss is not None
        else [
            ("peak allocated", memory.get("peak_allocated_bytes")),
            ("peak reserved", memory.get("peak_reserved_bytes")),
        ]
    )
    parts = memory.get("breakdown") or {}
    labels = {"optimizer_state": "optimizer state", "weight_copies": "weight copies", "kv_cache": "KV cache"}
    rows += [
        (f"analytic: {labels.get(k, k)}", v) for k, v in parts.items() if k not in ("params", "total") and v
    ]
    if parts:
        rows.append(("analytic: total", parts.get("total")))
    return pd.DataFrame(
        {
            "memory": [r[0] for r in rows],
            "MiB": pd.Series([r[1] / mib if r[1] is not None else None for r in rows], dtype=object),
        }
    )


def memory_operator_rows(records: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    mib = 2**20
    return pd.DataFrame(
        {
            "operator": df["name"],
            "calls": df["calls"],
            "self CPU mem (MiB)": df["self_cpu_memory_bytes"] / mib,
            "CPU mem (MiB)": df["cpu_memory_bytes"] / mib,
        }
    )


@dataclass
class BlockReport:
    run: Run  # the stored run the block times are of
    source: str
    steps: int  # measured steps the block times cover
    records: pd.DataFrame  # analysis.views.blocks.RECORD_COLUMNS
    phase_ns: dict[str, float]  # each phase's mean over those steps
    table: pd.DataFrame  # analysis.views.blocks.block_table
    notes: list[str] = field(default_factory=list)
    warning: str | None = None  # why the block times cannot be trusted (a degraded run's capture)

    @property
    def title(self) -> str:
        r = self.run
        return (
            f"blocks of run {r.id} ({r.model} {r.mode}, {r.attention} attention): "
            f"mean per step over {counted(self.steps, 'step')}, source {self.source}"
        )


def block_records_of(store: ResultsStore, run: Run) -> BlockRecords | None:
    """A run's block records: stored, else read from its trace; None for a run made without --nvtx-detail."""
    stored = stored_blocks(store, run)
    if stored is not None:
        records = stored.records
    else:
        if not (run.config or {}).get("nvtx_detail"):
            return None
        path = trace_of(run)
        if path is None:
            why = " (--compile runs are not timed per block: hooks would break the compiled graph)"
            raise HarnessError(
                f"run {run.id} has no per-block times stored and no trace to read them from"
                + (why if run.compile else "")
            )
        try:
            records, source = blocks_of_file(path, block_names(), stored_phases(run), run.warmup)
        except ExportError as e:
            raise HarnessError(f"cannot read per-block times from {path}: {e}") from None
        stored = BlockRecords(records, source, int(records["step"].nunique()), path)
    if records.empty:
        raise HarnessError(f"run {run.id} has no per-block times (status {run.status})")
    return stored


def block_report(store: ResultsStore, ref: str, *, by_layer: bool = False) -> BlockReport:
    """The run's per-block table (analysis.views.blocks.block_table) with its source."""
    run = resolve(store, ref)
    found = block_records_of(store, run)
    if found is None:
        # a program's run (`harness profile -- CMD`) is named after its program, not a model
        program = run.mode == PROGRAM_MODE
        how = "is a program's (harness profile)" if program else "was made without --nvtx-detail"
        like = "tiny" if program else run.model + ("" if run.mode == "train" else f" --mode {run.mode}")
        raise HarnessError(
            f"run {run.id} {how}: it has no per-block times; "
            f"`harness run {like} --nvtx-detail` makes a run that has",
            exit_code=2,
        )
    records, source, steps = found.records, found.source, found.steps
    notes = [f"read from {found.trace}"] if found.trace else []
    covered = {int(s) for s in records["step"]}
    # across ranks the block times are the first rank's (its timers, its trace): so are the phases they share
    first = min((t.rank or 0 for t in run.step_timings), default=0)
    timings = [t for t in run.step_timings if not t.warmup and (t.rank or 0) == first]
    measured = [t for t in timings if t.step in covered] or timings
    phase_ns: dict[str, float] = {}
    for phase in stored_phases(run):  # across ranks: the all-reduce too
        values = [t.duration_ns for t in measured if t.phase == phase]
        if values:
            phase_ns[phase] = sum(values) / len(values)
    if not phase_ns:
        raise HarnessError(f"run {run.id} has no measured steps")
    table = block_table(records, phase_ns, steps=steps, by_layer=by_layer)
    notes += _notes(run, source, set(records["block"]))
    if (unfinished := unfinished_note(run, steps, "block times")) is not None:
        notes.insert(0, unfinished)
    if (run.world_size or 1) > 1:
        notes.append(f"across {run.world_size} ranks: the block and phase times of rank {first}")
    return BlockReport(run, source, steps, records, phase_ns, table, notes, untrusted_blocks(run, source))


def unfinished_note(run: Run, steps: int, what: str) -> str | None:
    """The note of a run that did not finish (interrupted, oom, error): its `what` are of the `steps`
    measured steps it ran; None for one that finished (degraded too: its capture's warning is said apart)."""
    if run.status in ("ok", "degraded"):
        return None
    why = f": {' '.join(run.error.split())}" if run.error else ""
    return (
        f"run {run.id} did not finish ({run.status}{why}): its {what} are of the "
        f"{counted(steps, 'measured step')} it ran before it stopped"
    )


def untrusted_blocks(run: Run, source: str) -> str | None:
    """Why a degraded run's block times cannot be trusted where they are its capture's (its timers' stand)."""
    if run.status != "degraded" or source == BLOCK_TIMERS:
        return None
    why = run.error or "its capture failed its health checks"
    return (
        f"run {run.id} is degraded ({why}): these block times are its capture's, which failed its health "
        "checks; they cannot be trusted"
    )


def _notes(run: Run, source: str, blocks: set[str]) -> list[str]:
    notes = [f"source: {source}" + {
        BLOCK_TIMERS: " (the device synchronised around every block in the run's process)",
        "torch-trace": " (record_function ranges of the torch.profiler trace, CPU time)",
        "nvtx": " (NVTX ranges of the nsys export, CPU time)",
        "nvtx-gpu": " (GPU time of the kernels launched inside each range)",
    }.get(source, "")]  # fmt: skip
    if "sdpa" in blocks:
        notes.append(
            "attention is the fused sdpa: --attention math times qk_scores, softmax and attn_v apart"
        )
    if run.mode == "train" and source != BLOCK_TIMERS:
        notes.append("block ranges open in forward only: backward and optimizer are in `outside blocks`")
    elif run.mode == "train":
        notes.append("backward per block: autograd hooks; the embedding's backward is in `outside blocks`")
    return notes
