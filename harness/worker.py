"""Child-process entry: run one configuration and write its RunResult as JSON.

`harness sweep` starts one per configuration (so one's memory cannot affect the next) and
`harness run --nsys` starts one under nsys. Usage: python -m harness.worker CONFIG.json RESULT.json
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from harness.errors import HarnessError
from harness.records import RunConfig, RunResult, result_to_dict


def main(argv: list[str]) -> int:
    config_path, result_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(config_path.read_text())
    config = RunConfig(**spec["config"])
    from harness.runner import run_workload

    try:
        result = run_workload(config, run_id=spec["run_id"])
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # a crash in a sweep point is recorded, and the sweep goes on
        traceback.print_exc()
        result = RunResult(
            run_id=spec["run_id"], config=config, status="error", error=f"{type(e).__name__}: {e}"
        )
    result_path.write_text(json.dumps(result_to_dict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
