"""Write tests/oracles/analyze/: what `nsys analyze` prints for each case of tests/rule_exports.py.

    .venv/bin/python tests/make_rule_oracles.py [--nsys 2022.4=PATH] [--nsys 2023.4=PATH] [CASE ...]

Each case's export is built in a scratch folder, and each run of nsys gets its own copy of it (nsys may
add tables to the export it reads). The output is kept as printed, less the `Processing [...]` line and
blank lines, the scratch path replaced by `report.sqlite`: a CSV, nothing (the rule found nothing), or one
`SKIPPED: ...` line.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rule_exports import CASES, build, oracle_name  # noqa: E402

FIXTURES = HERE.parent.parent / "shared" / "fixtures" / "nsys"
OUT = HERE / "oracles" / "analyze"
NSYS = {
    "2022.4": "/work/main/.tools/nsys/usr/lib/nsight-systems/bin/nsys",
    "2023.4": "/work/tools/nsys-2023.4/usr/lib/nsight-systems/bin/nsys",
}


def analyze(nsys: str, export: Path, spec: str, scratch: Path) -> str:
    copy = scratch / "report.sqlite"
    shutil.copyfile(export, copy)
    copy.chmod(0o644)
    done = subprocess.run(
        [nsys, "analyze", "-r", spec, "-f", "csv", "-o", "-", str(copy)],
        capture_output=True,
        text=True,
        check=False,
        cwd=scratch,
    )
    lines = (done.stdout + done.stderr).replace(str(copy), "report.sqlite").splitlines()
    kept = [ln for ln in lines if ln.strip() and not ln.startswith("Processing [")]
    return "".join(f"{ln}\n" for ln in kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsys", action="append", default=[], metavar="VERSION=PATH")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    nsys = NSYS | dict(v.split("=", 1) for v in args.nsys)
    wanted = [c for c in CASES if not args.cases or c.name in args.cases]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for case in wanted:
            export = build(case, FIXTURES, scratch / f"{case.name}.sqlite")
            for version, path in nsys.items():
                if version not in case.versions:
                    continue
                folder = OUT / version / case.name
                folder.mkdir(parents=True, exist_ok=True)
                for spec in case.specs:
                    run = scratch / "run"
                    run.mkdir(exist_ok=True)
                    (folder / oracle_name(spec)).write_text(analyze(path, export, spec, run))
                    shutil.rmtree(run)
            print(f"{case.name}: {len(case.specs)} specs x {', '.join(case.versions)}")


if __name__ == "__main__":
    main()
