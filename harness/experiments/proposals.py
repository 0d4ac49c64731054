"""What `harness optimize` proposes for a capture's findings: each finding with the fixes of its rule (the
catalogue's), as a table; of an export or a stored run, proposed and not applied. A capture that failed its
health checks proposes nothing: its findings' time at stake comes from what is left of it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.errors import HarnessError
from harness.experiments.changes import applied
from workloads.plants.catalogue import FIXES, fixes_for

if TYPE_CHECKING:
    import pandas as pd

    from harness.core.records import RunConfig


@dataclass
class Proposal:
    """A finding and what the harness could change for it (`change`: a fix that applies, else None with
    why in `why`)."""

    rule: str
    at_stake_ns: int
    evidence: str
    fix: str | None
    change: RunConfig | None = None
    why: str | None = None


def untrusted_of(how: dict[str, Any]) -> str | None:
    """Why a capture's examination says it cannot be trusted (its failed health checks), else None."""
    return (how.get("advice") or {}).get("untrusted") or None


def proposal_table(found: list[Proposal]) -> pd.DataFrame:
    """Each finding with what the harness could change for it, and whether it applies."""
    import pandas as pd

    rows = [
        (p.rule, p.at_stake_ns, p.fix or "—", FIXES[p.fix].does if p.fix else "—",
         "yes" if p.change is not None else f"no: {p.why}", p.evidence)
        for p in found
    ]  # fmt: skip
    out = pd.DataFrame(rows, columns=["Finding", "Time at stake (ns)", "Change", "What it changes", "Applies",
                                      "Evidence"])  # fmt: skip
    out.attrs["wrap"] = ["What it changes", "Applies", "Evidence"]
    return out


# --- an export, or a stored run: proposals, not applied -------------------------------------------------

NOT_APPLIED = "proposed, not applied: the harness does not run this program (apply it in its code)"


def proposed(found: list[dict[str, Any]], why: str = NOT_APPLIED) -> list[Proposal]:
    """Each finding with the fixes for its rule, none applied (`why` says so)."""
    out = []
    for f in found:
        rule, stake, evidence = _finding(f)
        fixes = fixes_for(rule) or (None,)
        out += [
            Proposal(rule, stake, evidence, fix, why=why if fix else "no change answers it") for fix in fixes
        ]
    return out


def proposed_for_run(
    found: list[dict[str, Any]], config: RunConfig, device: str, unseen: Collection[str] = ()
) -> list[Proposal]:
    """A stored run of the harness's own: each finding with its fixes, none applied, each saying whether it
    applies to the run's configuration (the harness runs it: `harness optimize MODEL` tries those that do,
    but for the `unseen` rules, which its capture cannot see)."""
    out = []
    tries = "the `harness optimize` line below tries it" + one_process(config)
    for p in proposed(found):
        if p.fix is not None:
            change = applied(p.fix, config, device)
            why = change if isinstance(change, str) else NOT_SEEN if p.rule in unseen else tries
            p.why = "proposed, not applied: " + why
        out.append(p)
    return out


# a CPU run under torch.profiler: rules judged on its operators, which optimize's capture (nsys) has not
NOT_SEEN = "`harness optimize` captures under nsys, and a CPU capture holds no CUDA for this rule to read"


def one_process(config: RunConfig) -> str:
    """What `harness optimize MODEL` leaves out of a run across ranks (it runs one process); "" for one."""
    ranks = config.world_size
    return f" in one process (optimize runs one; this run ran {ranks} ranks)" if ranks > 1 else ""


def _finding(f: dict[str, Any]) -> tuple[str, int, str]:
    return str(f.get("rule", "")), int(f.get("at_stake_ns") or 0), str(f.get("evidence", ""))


class Untrusted(HarnessError):
    """A capture that failed its health checks: no change is proposed from its findings (their time at
    stake comes from what is left of it), as `advise` ranks none."""

    def __init__(self, why: str, ref: Any) -> None:
        super().__init__(
            f"no proposals for {ref}: its capture cannot be trusted ({why}), so the time at stake of its "
            f"findings would come from what is left of it; `harness health {ref}` says more, `harness advise "
            f"{ref} --ignore-health` lists the findings anyway"
        )


def stored_findings(advice: dict[str, Any] | None, run: str) -> list[dict[str, Any]]:
    """The findings stored with a run; Untrusted where its capture failed its health checks."""
    if why := untrusted_of({"advice": advice}):
        raise Untrusted(why, run)
    return list((advice or {}).get("findings") or [])


def proposals(config: RunConfig, found: list[dict[str, Any]], device: str) -> list[Proposal]:
    """Each finding's fixes as proposals: the change where it applies to `config`, else why not; a finding
    no fix answers is one proposal with no fix."""
    out = []
    for f in found:
        rule, stake, evidence = (
            str(f.get("rule", "")),
            int(f.get("at_stake_ns") or 0),
            str(f.get("evidence", "")),
        )
        fixes = fixes_for(rule)
        if not fixes:
            out.append(Proposal(rule, stake, evidence, None, why="no change the harness can make answers it"))
        for fix in fixes:
            change = applied(fix, config, device)
            p = Proposal(rule, stake, evidence, fix)
            if isinstance(change, str):
                p.why = change
            else:
                p.change = change
            out.append(p)
    return out
