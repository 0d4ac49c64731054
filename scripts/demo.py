"""`make demo`: the harness's main job in a few minutes, each command printed before it runs.

1. `harness run tiny --nsys` on the CPU (a short run: 3 measured steps of batch 2 × 64 tokens), or
   `harness run medium --nsys` on a machine with an NVIDIA GPU: phases timed, the capture read, NVTX
   checked against the timers, nsys's overhead against a baseline run.
2. The kernel and NVTX tables of a GPU export: the run's own on a GPU; on the CPU, where a capture holds no
   kernels, a real capture of `harness run tiny` on an H100 kept in the repository
   (tests/data/h100/tiny-cupti13.sqlite.xz, unpacked into demo/).
3. `harness dashboard` writing its page (demo/dashboard.html), then what to try next.

Everything it writes goes to demo/ (HARNESS_DEMO_DIR), the runs to the results database (HARNESS_DB). Without
nsys (scripts/install-nsys.sh could not install it) the run goes without it, and says so.
"""

from __future__ import annotations

import lzma
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("HARNESS_DEMO_DIR") or REPO / "demo")  # git-ignored
GPU_EXPORT = REPO / "tests" / "data" / "h100" / "tiny-cupti13.sqlite.xz"
HARNESS = str(Path(sys.executable).with_name("harness"))


def say(text: str) -> None:
    print(text, flush=True)


def harness(*args: str, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    """`harness ARGS`, shown as it would be typed; its output to the terminal unless `quiet` (then kept, as
    wide as it comes: no line folded)."""
    say(f"\n$ harness {shlex.join(args)}")
    env = {**os.environ, "COLUMNS": "1000"} if quiet else None
    done = subprocess.run([HARNESS, *args], text=True, capture_output=quiet, env=env)
    if done.returncode != 0:
        if quiet:
            sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"demo: `harness {shlex.join(args)}` exited {done.returncode}")
    return done


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def has_nsys() -> bool:
    from harness.core.errors import NsysError
    from harness.execution.nsys.find import find_nsys

    try:
        find_nsys()
    except NsysError as e:
        say(f"demo: {e}: the run goes without nsys")
        return False
    return True


def latest_export() -> Path | None:
    from harness.store.results import ResultsStore

    path = ResultsStore(None, readonly=True).get("latest").nsys_sqlite
    return Path(path) if path and Path(path).is_file() else None


def unpacked_gpu_export() -> Path:
    """The H100 capture kept in the repository, unpacked once into demo/."""
    target = OUT / "h100-tiny.sqlite"
    if not target.is_file():
        partial = target.with_suffix(".partial")
        partial.write_bytes(lzma.decompress(GPU_EXPORT.read_bytes()))
        partial.replace(target)
    return target


def main() -> None:
    started = time.monotonic()
    OUT.mkdir(exist_ok=True)
    gpu, nsys = has_gpu(), has_nsys()
    if gpu:
        run = ["run", "medium", "--device", "cuda"]
    else:
        run = ["run", "tiny", "--device", "cpu", "--steps", "3", "--warmup", "1", "--batch-size", "2",
               "--context-length", "64"]  # fmt: skip
    say("demo 1/3: a workload timed phase by phase" + (", under nsys" if nsys else ""))
    harness(*run, *(["--nsys", "--profile-dir", rel(OUT / "profiles")] if nsys else []))

    export = latest_export() if gpu and nsys else None
    if export is None:
        export = unpacked_gpu_export()
        say(f"\ndemo 2/3: a real GPU capture ({rel(export)}: `harness run tiny` on an H100, nsys 2023.4)")
    else:
        say("\ndemo 2/3: the kernels and NVTX ranges of the run's export")
    harness("kernels", rel(export), "--top", "5")
    harness("nvtx-gpu", rel(export))

    say("\ndemo 3/3: the dashboard of the runs stored so far")
    page = OUT / "dashboard.html"
    panels = OUT / "dashboard-panels.txt"
    done = harness("dashboard", "--out", rel(page), quiet=True)
    panels.write_text(done.stdout)
    say(done.stdout.splitlines()[0] if done.stdout else f"wrote {rel(page)}")
    say(f"(each panel and what fills a missing one: {rel(panels)})")

    where = rel(export)
    say(f"\ndone in {time.monotonic() - started:.0f} s. Next (after `source .venv/bin/activate`):")
    width = max(len(where), len("YOUR.sqlite")) + len("harness advise ")
    for command, what in [
        (f"harness advise {where}", "what to fix first, by time at stake"),
        (f"harness health {where}", "can this capture be trusted?"),
        ("harness show latest", "the run again, with its health"),
        ("harness kernels YOUR.sqlite", "any export, as `nsys stats` prints it"),
        (f"open {rel(page)}", "the dashboard"),
        ("harness --help", "every command, by task"),
    ]:
        say(f"  {command:<{width}}  {what}")
    say("  README.md has a five-minute tour; docs/ the user guide")


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    os.chdir(REPO)
    main()
