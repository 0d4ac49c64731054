"""torchrun, with its failures written down: `python -m harness.execution.ranks.rank_launcher FAILURES.json
TORCHRUN_ARGS...`

Runs PyTorch's own launcher (torch.distributed.run: its argument parser and launch) in this process. When
a rank fails, torchrun stops the others and raises ChildFailedError; this writes its failures to
FAILURES.json as {"first": RANK, "ranks": {RANK: {"exitcode", "pid", "message"}}} for the harness
(harness/execution/ranks/multirank.py) to name the failed rank, and exits 1. torchrun's own report still
goes to stderr.

A signal this process was started ignoring (SIGINT, SIGHUP: a background job, `nohup`) is left out of the
signals torchrun takes over, so it stays ignored here and in the ranks: taken, it would stop every rank.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from harness.core import signals


def main(argv: list[str]) -> int:
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    failures_path = Path(argv[0])
    args = torchrun.get_args_parser().parse_args(argv[1:])
    if hasattr(args, "signals_to_handle"):
        taken = [name.strip() for name in args.signals_to_handle.split(",")]
        args.signals_to_handle = ",".join(n for n in taken if not signals.ignored(getattr(signal, n, 0)))
    try:
        torchrun.run(args)
    except ChildFailedError as e:
        first_rank = _first(e)
        ranks = {
            str(rank): {"exitcode": f.exitcode, "pid": f.pid, "message": str(f.message)}
            for rank, f in e.failures.items()
        }
        failures_path.write_text(json.dumps({"first": first_rank, "ranks": ranks}))
        print(e.format_msg(), file=sys.stderr)
        return 1
    return 0


def _first(error: Any) -> int:
    """The rank that failed first.

    torchrun orders failures by timestamp, but a rank that leaves no error file is stamped in whole seconds
    when torchrun sees it, so the cause and the ranks its death broke often share a second. Once one rank has
    failed, torchrun ends the others with SIGTERM and lists them too: under load a rank whose collective call
    failed is often still exiting then, and dies of that SIGTERM. So, first to last: a rank killed by a
    signal torchrun does not send (SIGKILL, SIGSEGV...: the cause), a rank that exited with an error (whose
    collective call may have failed), a rank ended by torchrun's SIGTERM (only ever a cause when no other
    rank failed). Within each, the earliest; of one second, the first that torchrun saw."""
    failures = error.failures
    closing = -int(signal.SIGTERM)
    for group in (
        [r for r, f in failures.items() if f.exitcode < 0 and f.exitcode != closing],
        [r for r, f in failures.items() if f.exitcode > 0],
    ):
        if group:
            return min(group, key=lambda rank: failures[rank].timestamp)  # min keeps the first of equals
    rank, _ = error.get_first_failure()
    return rank


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
