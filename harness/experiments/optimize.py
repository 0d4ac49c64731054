"""`harness optimize MODEL [run options]`: the baseline's findings, each fix the harness can make in its own
workloads tried against it, measured, and kept when it is faster.

1. The baseline configuration is captured under nsys (light), and its capture examined
   (analysis.front.examine: health and findings, by rule id). Each finding's fixes (the catalogue's,
   workloads.plants.catalogue.fixes_for) that apply to the configuration (harness.experiments.changes)
   are the candidates, the largest time at stake first.
2. Each candidate is run against the configuration so far, alternating, each run in a fresh process without
   a profiler (as `harness overhead` alternates: `repeats` rounds, or until the interval of its effect is
   under ±`ci_target` %), then captured itself: is the finding gone from its own findings?
3. The effect is on time per token (a larger batch makes a step longer and the tokens cheaper), by the run
   means of both sides with the drift between runs measured for the configurations (analysis.compare.drift):
   faster where the interval lies below zero, slower above, no difference where it lies within ±5% (else
   inconclusive, with the interval). A faster change is kept: the next candidates stack on it, and the
   candidate's own findings add theirs. A run stopped (Ctrl-C, SIGTERM) leaves its change not judged.
4. `budget` seconds bound it: no run starts that would end after them (the duration of the runs so far
   tells); what was not tried is said so.

Every run is stored with the optimisation's experiment id (optimize-…), and in its record (`extra`,
stored as the run's summary) its part: `{"role": "timed" | "capture", "stack": [fixes], "change": fix}`,
and a candidate's timed run the verdict so far (`"verdict"`: its last round's is the change's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.compare.drift import compare_runs, levels
from analysis.compare.overhead import STEP_SUM
from analysis.front.examine import examine_capture
from analysis.trace.exports import sqlite_for
from harness.core import signals
from harness.core.devices import resolve_device
from harness.core.errors import HarnessError
from harness.core.records import RunConfig, RunResult, new_id
from harness.execution.nsys import export_report
from harness.experiments.changes import applied
from harness.experiments.drift import compared_drift, key_of
from harness.experiments.proposals import Proposal, Untrusted, proposals, untrusted_of
from harness.profilers.base import run_baseline
from harness.profilers.capture import save as save_run
from harness.profilers.nsys import PROFILER
from workloads.names import counted
from workloads.plants.catalogue import unseen

if TYPE_CHECKING:
    import pandas as pd

    from analysis.compare.drift import Drift
    from analysis.compare.overhead import Comparison
    from harness.store.results import ResultsStore

DEFAULT_BUDGET = 240.0  # s: four minutes, the table of verdicts within five
DEFAULT_REPEATS = 2
MAX_ROUNDS = 10  # with a CI target: rounds of one candidate at most (more where --repeats asks)
FASTER, SAME, SLOWER = "faster", "no difference", "slower"
# an interval across zero wider than this either side (or than --ci-target) rules out no effect that
# matters: not "no difference", which it cannot tell from a large one, but inconclusive with its width
SAME_WITHIN_PCT = 5.0
INCONCLUSIVE = "inconclusive"
NOT_RUN, FAILED = "not run", "failed"
STOPPED = "not judged"  # stopped (Ctrl-C, SIGTERM) between its rounds: the rounds run are shown
# one round and no drift measured for the configurations: no interval, so no call either way
NO_VERDICT = "no verdict: one round, no drift measured (--repeats 2 or more)"
# two changes kept or more, then a stop (Ctrl-C, SIGTERM) before the stack was timed against the baseline
UNCHECKED = f"{NOT_RUN}: stopped before the changes kept were measured together against the baseline"

Capture = Callable[[RunConfig], tuple[RunResult, dict[str, Any], list[str]]]
Timed = Callable[[RunConfig], RunResult]


@dataclass
class Tried:
    """One change against the configuration before it: its rounds, the comparison, the verdict."""

    fix: str
    rule: str
    base: RunConfig
    config: RunConfig
    runs: list[tuple[RunResult, RunResult]] = field(default_factory=list)  # (before, after) per round
    per_token: Comparison | None = None
    step: Comparison | None = None
    tokens: tuple[tuple[float, float, float], tuple[float, float, float]] | None = None
    verdict: str = NOT_RUN
    gone: bool | None = None  # the finding gone from the candidate's own findings (None: not captured)
    why: str | None = None
    next: str | None = None

    @property
    def accepted(self) -> bool:
        return self.verdict == FASTER


@dataclass
class Optimisation:
    experiment: str
    baseline: RunConfig
    final: RunConfig
    # the baseline's, as examined; None: its capture was stopped (Ctrl-C) before any were judged
    findings: list[dict[str, Any]] | None = None
    proposals: list[Proposal] = field(default_factory=list)
    tried: list[Tried] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    device_name: str = ""
    seconds: float = 0.0
    baseline_runs: list[RunResult] = field(default_factory=list)  # timed, where no change was tried
    # the drift stored for the baseline's configuration, its own runs left out (its level's interval)
    baseline_drift: Drift | None = None
    final_check: Tried | None = None  # the final configuration against the baseline (two changes kept)
    interrupted: int | None = None  # the signal (Ctrl-C, SIGTERM) that stopped it: no run started after it

    @property
    def accepted(self) -> list[Tried]:
        return [t for t in self.tried if t.accepted]


def findings_of(how: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings a capture's examination stored with its run (largest at stake first)."""
    return list(((how.get("advice") or {}).get("findings")) or [])


def per_token_ns(result: RunResult) -> float:
    return 1e9 / result.tokens_per_s if result.tokens_per_s else math.nan


def step_ns(result: RunResult) -> float:
    measured = [sum(s.phases.values()) for s in result.steps if not s.warmup]
    return sum(measured) / len(measured) if measured else math.nan


class Clock:
    """The budget: seconds since the start, and whether a run of the kind given would end inside it."""

    def __init__(self, budget: float | None) -> None:
        self.began, self.budget = time.monotonic(), budget
        self.took: dict[str, list[float]] = {"timed": [], "capture": []}

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def fits(self, *kinds: str) -> bool:
        if self.budget is None:
            return True
        guess = 0.0
        for kind in kinds:
            seen = self.took[kind] or self.took["capture"] or self.took["timed"]
            guess += sum(seen) / len(seen) if seen else 0.0
        return self.elapsed() + guess <= self.budget

    def timing(self, kind: str, fn: Callable[[], Any]) -> Any:
        start = time.monotonic()
        try:
            return fn()
        finally:
            self.took[kind].append(time.monotonic() - start)


def real_capture(options: Any) -> Capture:
    """A configuration under nsys (light), its capture examined: the nsys profiler's overhead run."""

    def capture(config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        (_, run), = PROFILER.overhead_runs(config, options, ["light"])  # fmt: skip
        return run()

    return capture


def real_timed(config: RunConfig) -> RunResult:
    return run_baseline(config)[0]


def optimize(
    config: RunConfig,
    store: ResultsStore,
    *,
    capture: Capture,
    timed: Timed = real_timed,
    repeats: int = DEFAULT_REPEATS,
    ci_target: float | None = None,
    budget: float | None = DEFAULT_BUDGET,
    progress: Callable[[str], None] | None = None,
) -> Optimisation:
    """Capture the baseline, then try each applicable fix of its findings against the configuration so far
    (module docstring); every run stored as one experiment."""
    device = resolve_device(config.device).type
    out = Optimisation(new_id("optimize"), config, config)
    clock = Clock(budget)

    def say(text: str) -> None:
        if progress:
            progress(text)

    def store_run(
        result: RunResult, role: str, stack: list[str], change: str | None, verdict: str | None = None,
        **how: Any,
    ) -> None:  # fmt: skip
        part = {"role": role, "stack": list(stack), "change": change}
        result.extra["optimize"] = {**part, **({"verdict": verdict} if verdict else {})}
        save_run(store, result, experiment=out.experiment, **how)
        out.device_name = out.device_name or result.device_name
        if result.status == "interrupted" and out.interrupted is None:
            out.interrupted = signals.signal_in(result.error)
            out.notes.append(f"run {result.run_id} {result.error}; stored as interrupted, no run after it")

    def captured(cfg: RunConfig, change: str | None) -> list[dict[str, Any]] | None:
        with signals.deferred():  # one that came as it ended all the same: raised once it is stored
            result, how, notes = clock.timing("capture", lambda: capture(cfg))
            out.notes += [n for n in notes if n not in out.notes]
            store_run(result, "capture", cfg.fixes, change, **how)
        if result.status not in ("ok", "degraded"):
            out.notes.append(f"capture {result.run_id} ended {result.status}: {result.error}")
            return None
        if why := untrusted_of(how):  # its findings' time at stake comes from what is left of the capture
            what = (
                "no change is proposed from its findings"
                if change is None
                else (
                    f"whether {change} removed its finding is not judged, and no change is proposed from it"
                )
            )
            out.notes.append(f"capture {result.run_id} cannot be trusted ({why}): {what}")
            return None
        return findings_of(how)

    current = config
    try:
        say("baseline under nsys: its findings")
        found = captured(config, None)
        if out.interrupted is not None:
            out.seconds = clock.elapsed()
            return out
        if found is None:
            raise HarnessError(f"the baseline's capture failed: {out.notes[-1]}")
        out.findings = found
        if why := unseen(config.plant, device, {str(f.get("rule")) for f in found}):
            out.notes.append(why)
        out.proposals = proposals(config, found, device)
        queue = [p for p in out.proposals if p.change is not None]
        tried_fixes: set[str] = set()
        while queue and out.interrupted is None:
            p = queue.pop(0)
            assert p.fix is not None
            if p.fix in tried_fixes:
                continue
            tried_fixes.add(p.fix)
            change = applied(p.fix, current, device)
            if isinstance(change, str):  # an earlier change made it moot
                continue
            t = Tried(p.fix, p.rule, current, change)
            out.tried.append(t)
            _measure(t, store_run, timed, clock, say, repeats, ci_target, store, out.experiment)
            if t.verdict in (NOT_RUN, FAILED, STOPPED):
                continue
            if t.accepted:
                current = change
            if clock.fits("capture"):
                say(f"{p.fix}: its own findings under nsys")
                own = captured(change, p.fix)
                if own is not None and out.interrupted is None:
                    t.gone = p.rule not in {f.get("rule") for f in own}
                    if t.accepted:
                        queue += [q for q in proposals(change, own, device) if q.change is not None]
            else:  # its row's "Finding gone" is "—": say why
                t.why = "not captured: the budget"
                out.notes.append(
                    f"{p.fix} was not captured (the budget): whether its finding is gone is not known"
                )
        if not out.tried and out.interrupted is None:
            _baseline_only(out, config, store_run, timed, clock, say, repeats)
        if len(out.accepted) > 1 and out.interrupted is None:
            check = Tried("final", "all kept", config, current)  # the stack against the baseline, alike
            _measure(check, store_run, timed, clock, say, repeats, ci_target, store, out.experiment)
            out.final_check = check
    except KeyboardInterrupt as e:  # one that came as a run ended, held until it was stored
        out.interrupted = signals.signal_of(e)
        stopped = f"interrupted by {signals.name(out.interrupted)}"
        out.notes.append(f"{stopped} between runs: every run before it is stored, no run after it")
        last = out.final_check or (out.tried[-1] if out.tried else None)
        if last is not None and last.runs and last.verdict == NOT_RUN:  # stopped between its rounds
            last.verdict, last.why = STOPPED, f"{stopped} after {counted(len(last.runs), 'round')}"
    for i, t in enumerate(out.tried):
        t.next = next((u.fix for u in out.tried[i + 1 :]), None)
    out.final = current
    timed_base = [b for b, _ in out.tried[0].runs] if out.tried else out.baseline_runs
    if timed_base:
        key = key_of(config.to_dict(), timed_base[0].device_name)
        out.baseline_drift = _drift(store, [key], timed_base, len(timed_base), out.experiment)
    out.seconds = clock.elapsed()
    return out


def _measure(
    t: Tried, store_run: Callable[..., None], timed: Timed, clock: Clock, say: Callable[[str], None],
    repeats: int, ci_target: float | None, store: ResultsStore, experiment: str,
) -> None:  # fmt: skip
    """Rounds of the configuration before and the candidate, alternating, until `repeats` (or the CI
    target, within MAX_ROUNDS or `repeats`, the larger), while the budget allows two more runs; then the
    comparison and verdict."""
    rounds = 0
    while True:
        target = repeats if ci_target is None else max(repeats, MAX_ROUNDS)  # --repeats rounds at least
        if rounds >= target or not clock.fits("timed", "timed"):
            if rounds == 0:
                t.why = "the budget"  # the table says "not run: the budget"
            break
        pair = []
        # held until the round is stored: one that came as a run ended all the same ends the optimisation
        # once its runs are stored (raised as it came, when the block ends)
        with signals.deferred() as came:
            for side, cfg in (("before", t.base), ("with it", t.config)):
                say(f"{t.fix}: round {rounds + 1}{'' if ci_target else f'/{repeats}'}, {side}")
                pair.append(clock.timing("timed", lambda cfg=cfg: timed(cfg)))
                if pair[-1].status == "interrupted" or came:  # Ctrl-C or SIGTERM: the other side not started
                    break
            rounds += 1
            before, after = pair[0], pair[1] if len(pair) > 1 else None
            bad = next((r for r in pair if r.status != "ok"), None)
            if bad is None and after is not None:
                t.runs.append((before, after))
                _compare(t, store, experiment)
            # stored after the comparison, so the candidate's run carries the verdict so far (the dashboard's)
            store_run(before, "timed", t.base.fixes, None)
            stopped = bad is not None and bad.status == "interrupted"  # the user's stop, not the change's
            if after is not None:
                verdict = _verdict(t.per_token, ci_target) if bad is None else STOPPED if stopped else FAILED
                store_run(after, "timed", t.config.fixes, t.fix, verdict=verdict)
        if bad is not None:  # a stop (Ctrl-C, SIGTERM): the rounds that finished are shown, none judged
            which = "the candidate" if bad is after else "the configuration before it"
            failed = f"{which} ended {bad.status}: {bad.error}"
            stop = f"{signals.stopped_by(bad.error)} after {counted(len(t.runs), 'round')}"
            t.verdict, t.why = (STOPPED, stop) if stopped else (FAILED, failed)
            return
        settled = t.per_token is not None and t.per_token.noise_pct < (ci_target or 0)
        if ci_target is not None and rounds >= max(repeats, 2) and settled:
            break
    if t.runs:
        t.verdict = _verdict(t.per_token, ci_target)


def _compare(t: Tried, store: ResultsStore, experiment: str) -> None:
    """The candidate's runs against those before it: time per token (the verdict's), step time, tokens/s,
    with the drift measured for both configurations (`_drift`)."""
    before = [b for b, _ in t.runs]
    after = [a for _, a in t.runs]
    keys = [key_of(r.config.to_dict(), r.device_name) for r in (before[0], after[0])]
    drift = _drift(store, keys, [*before, *after], len(t.runs), experiment)
    t.per_token = compare_runs([per_token_ns(r) for r in before], [per_token_ns(r) for r in after], drift)
    t.step = compare_runs([step_ns(r) for r in before], [step_ns(r) for r in after], drift)
    rate = [[r.tokens_per_s or math.nan for r in side] for side in (before, after)]
    t.tokens = levels(rate[0], rate[1], drift)


def _drift(
    store: ResultsStore, keys: list[tuple[Any, ...]], runs: list[RunResult], rounds: int, experiment: str
) -> Drift | None:
    """The drift `runs` (`rounds` of this optimisation's, one side or two) are judged against, as diff judges
    the runs it compares (drift.compared_drift): measured from the other runs of their configurations; where
    that leaves none measured and they are one round, the optimisation's own drift, them among its runs,
    stored or in hand."""
    compared = dict.fromkeys((r.run_id for r in runs), experiment)
    return compared_drift(store, keys, compared, unstored=runs, one_a_side=rounds == 1)[0].get(STEP_SUM)


def _verdict(c: Comparison | None, within: float | None = None) -> str:
    """Faster where the interval of the time per token lies below zero, slower above; across zero, no
    difference where it lies within ±`within` % (SAME_WITHIN_PCT by default), else inconclusive."""
    if c is None or math.isnan(c.ci_low_pct):
        return NO_VERDICT
    if c.ci_high_pct < 0 or c.ci_low_pct > 0:
        return FASTER if c.ci_high_pct < 0 else SLOWER
    bound = within or SAME_WITHIN_PCT
    if -bound <= c.ci_low_pct and c.ci_high_pct <= bound:
        return SAME
    return (
        f"{INCONCLUSIVE} (CI {c.ci_low_pct:+.1f}…{c.ci_high_pct:+.1f}%): more rounds (--repeats, "
        "--ci-target) could tell"
    )


def _baseline_only(
    out: Optimisation, config: RunConfig, store_run: Callable[..., None], timed: Timed, clock: Clock,
    say: Callable[[str], None], repeats: int,
) -> None:  # fmt: skip
    """No change to try: the baseline timed `repeats` times for its figures (and the drift they show)."""
    for i in range(repeats):
        if not clock.fits("timed"):
            if i == 0:
                out.notes.append(
                    f"the budget ({clock.budget:g} s) left no room for a timed run of the baseline after its "
                    f"capture ({clock.elapsed():.0f} s): no figures for it (a larger --budget)"
                )
            break
        say(f"baseline, run {i + 1}/{repeats}: nothing to try")
        with signals.deferred():  # one that came as it ended all the same: raised once it is stored
            result = clock.timing("timed", lambda: timed(config))
            store_run(result, "timed", config.fixes, None)
            if result.status == "ok":
                out.baseline_runs.append(result)
        if result.status != "ok":
            out.notes.append(f"baseline run {result.run_id} ended {result.status}: {result.error}")
            break


# --- what it prints ------------------------------------------------------------------------------------

# the verdict is judged on time per token (its change and interval: the Time/token columns); the step's own
# interval is beside its change (a larger batch: each step longer, each token cheaper)
COLUMNS = [
    "Change", "Finding", "Rounds", "Step before (ns)", "Step after (ns)", "Δ step (%)", "Step CI low (%)",
    "Step CI high (%)", "Tokens/s before", "Tokens/s before low", "Tokens/s before high", "Tokens/s after",
    "Tokens/s after low", "Tokens/s after high", "Δ tokens/s (%)", "Δ time/token (%)",
    "Time/token CI low (%)", "Time/token CI high (%)", "Verdict", "Finding gone", "Next",
]  # fmt: skip


def _rate(c: Comparison | None) -> float:
    """Tokens/s's change from the time per token's (%)."""
    nan = c is None or math.isnan(c.effect_pct)
    return math.nan if nan or c is None else 100 / (1 + c.effect_pct / 100) - 100


def _per_token(c: Comparison | None) -> dict[str, float]:
    """The verdict's figures: time per token's change and its 95% interval (%)."""
    return {} if c is None else {"Δ time/token (%)": c.effect_pct, "Time/token CI low (%)": c.ci_low_pct,
                                 "Time/token CI high (%)": c.ci_high_pct}  # fmt: skip


def _row(change: str, finding: str, t: Tried | None, verdict: str, nxt: str | None) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS, math.nan)
    row.update({"Change": change, "Finding": finding, "Verdict": verdict, "Next": nxt or "—",
                "Finding gone": "—", "Rounds": 0})  # fmt: skip
    if t is None or t.step is None or t.tokens is None:
        return row
    (b, bl, bh), (a, al, ah) = t.tokens
    row.update({
        "Rounds": len(t.runs), "Step before (ns)": t.step.baseline_mean,
        "Step after (ns)": t.step.treatment_mean,
        "Δ step (%)": t.step.effect_pct, "Step CI low (%)": t.step.ci_low_pct,
        "Step CI high (%)": t.step.ci_high_pct,
        "Tokens/s before": b, "Tokens/s before low": bl, "Tokens/s before high": bh, "Tokens/s after": a,
        "Tokens/s after low": al, "Tokens/s after high": ah, "Δ tokens/s (%)": _rate(t.per_token),
        **_per_token(t.per_token),
        "Finding gone": "—" if t.gone is None else "yes" if t.gone else "no",
    })  # fmt: skip
    return row


def _said(t: Tried) -> str:
    """Its verdict, with why where it was not run or failed."""
    return (
        t.verdict if t.why is None or t.verdict not in (NOT_RUN, FAILED, STOPPED) else f"{t.verdict}: {t.why}"
    )


def verdict_table(o: Optimisation) -> pd.DataFrame:
    """Per change tried: step time and tokens/s before and after with their 95% intervals, the verdict (on
    time per token), whether its finding is gone from the candidate's own findings, the next candidate;
    first the baseline, last the final configuration against it."""
    import pandas as pd

    first = o.tried[0] if o.tried else None
    judged = "—" if o.findings is None else counted(len(o.findings), "finding")
    base = _row("baseline", judged, None, "—", first.fix if first else None)
    runs = [b for b, _ in first.runs] if first else o.baseline_runs
    if runs:
        (m, low, high), _ = levels([r.tokens_per_s or math.nan for r in runs], [], o.baseline_drift)
        # the geometric mean of its runs' steps, as the changes' rows give it (compare_runs' level)
        steps = [math.log(s) for s in map(step_ns, runs) if s > 0]
        step = math.exp(sum(steps) / len(steps)) if steps else math.nan
        base.update({"Rounds": len(runs), "Step before (ns)": step, "Tokens/s before": m,
                     "Tokens/s before low": low, "Tokens/s before high": high})  # fmt: skip
    rows = [base] + [_row(t.fix, t.rule, t, _said(t), t.next) for t in o.tried]
    kept = o.accepted
    stack = " + ".join(t.fix for t in kept) or "no change kept"
    if len(kept) > 1 and o.final_check is None:  # a stop before the stack met the baseline: no figures of it
        rows.append(_row(f"final: {stack}", "—", None, UNCHECKED, None))
    else:
        final = o.final_check if o.final_check is not None else kept[0] if kept else None
        rows.append(_row(f"final: {stack}", "—", final, _said(final) if final else "—", None))
    out = pd.DataFrame(rows, columns=COLUMNS)
    out.attrs["deciding"] = ["Change", "Verdict", "Δ tokens/s (%)", "Finding gone", "Next"]
    out.attrs["priority"] = [
        "Change", "Verdict", "Δ tokens/s (%)", "Time/token CI low (%)", "Time/token CI high (%)",
        "Step before (ns)", "Step after (ns)", "Finding gone", "Next", "Tokens/s before", "Tokens/s after",
        "Δ step (%)",
    ]  # fmt: skip
    out.attrs["wrap"] = ["Verdict"]
    return out


def export_findings(path: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """An export's (or report's) findings, as the front door examines a capture, and its notes."""
    seen = examine_capture(sqlite_for(path, export_report))
    if why := untrusted_of(seen.stored):
        raise Untrusted(why, path)
    return list((seen.advice or {}).get("findings") or []), list(seen.notes)
