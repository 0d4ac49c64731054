"""torchrun, with its failures written down: `python -m harness.execution.ranks.rank_launcher FAILURES.json
TORCHRUN_ARGS...`

Runs PyTorch's own launcher (torch.distributed.run: its argument parser and launch) in this process. When
a rank fails, torchrun stops the others and raises ChildFailedError; this writes its failures to
FAILURES.json as {"first": RANK, "ranks": {RANK: {"exitcode", "pid", "message"}}} for the harness
(harness/execution/ranks/multirank.py) to name the failed rank, and exits 1. torchrun's own report still
goes to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    failures_path = Path(argv[0])
    args = torchrun.get_args_parser().parse_args(argv[1:])
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
    """The rank that failed first. torchrun orders by timestamp, but a rank killed by a signal leaves no
    error file and is stamped in whole seconds when seen, often with the ranks its death broke (their
    collective calls fail): a rank killed by a signal is the cause, so it comes first."""
    killed = [rank for rank, f in error.failures.items() if f.exitcode < 0]
    if killed:
        return min(killed, key=lambda rank: (error.failures[rank].timestamp, rank))
    rank, _ = error.get_first_failure()
    return rank


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
