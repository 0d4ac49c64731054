"""`harness doctor`: is this machine ready to profile? nsys, an NVTX self-test, torch, CUDA, NVML, whether the
nsys can trace this CUDA, and on a GPU a self-test of the GPU path (the self-tests:
harness.experiments.selftest)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING

from harness.core import nvtx_ranges as emitter
from harness.core.errors import HarnessError
from harness.energy import power
from harness.execution import nsys
from harness.execution.nsys.cuda_support import assess
from harness.execution.nsys.find import INJECTION, missing_injection
from harness.experiments import selftest
from harness.experiments.selftest import ITEM
from harness.store.results import NoDatabase, ResultsStore, describe_url, resolve_url

if TYPE_CHECKING:
    import pandas as pd

    from harness.execution.nsys import NsysInfo

FLAGS_OF_INTEREST = (
    "python-backtrace", "cuda-graph-trace", "capture-range-end", "cpuctxsw", "sample", "cudabacktrace",
    "export",
)  # fmt: skip


@dataclass
class Check:
    item: str
    status: str  # ok | warn | fail | info
    detail: str


def check_nsys(nsys_path: str | None) -> tuple[list[Check], NsysInfo | None]:

    try:
        info = nsys.find_nsys(nsys_path)
    except HarnessError as e:
        return [Check("nsys", "fail", str(e))], None
    found = Check("nsys", "ok", f"{info.path} (found via {info.source})")
    lacking = missing_injection(info.path)
    if lacking is not None:
        found = Check(
            "nsys",
            "fail",
            f"{info.path} (found via {info.source}) is incomplete: no {INJECTION} in {lacking}, so it runs a "
            "program and records nothing of it; install it again whole (the project-local copy: `make "
            "setup`)",
        )
    known = [f for f in FLAGS_OF_INTEREST if info.supports(f)]
    missing = [f for f in FLAGS_OF_INTEREST if not info.supports(f)]
    lacks = ", ".join(f"--{f}" for f in missing) + " (left out of the commands)"
    flags = "supports " + ", ".join(f"--{f}" for f in known)
    if not known:
        flags = f"lacks every flag checked: {lacks}"
    elif missing:
        flags += f"; lacks {lacks}"
    said = Check("nsys profile flags", "info", flags)
    if not {"trace", "output"} <= info.flags:  # every nsys lists both: this one answered as none does
        said = Check(
            "nsys profile flags",
            "warn",
            "`nsys profile --help` does not list --trace and --output, as every nsys does: it may not be "
            "nsys, or it failed; the self-test (without --no-self-test) captures a program to tell",
        )
    return [
        found,
        Check("nsys version", "ok", info.version),
        Check("nsys CUPTI", "info", cuptis_said(info)),
        said,
    ], info


def cuptis_said(info: NsysInfo) -> str:
    """The CUPTI libraries in the nsys's target folder: it traces with the newest the driver allows."""
    if not info.cuptis:
        return "no libcupti.so.X.Y found beside it (cannot tell which CUDA it traces)"
    return f"{', '.join(info.cuptis)} in its target folder (it traces with the newest the driver allows)"


def self_test(info: NsysInfo) -> Check:
    """The NVTX self-test (harness.experiments.selftest): one range emitted, profiled, read back."""
    return Check(*selftest.nvtx_self_test(info))


def check_nvtx(info: NsysInfo | None) -> Check:
    try:
        version = metadata.version("nvtx")
    except metadata.PackageNotFoundError:
        return Check("python nvtx", "warn", f"not installed; emitter: {emitter.EMITTER}")
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if info is not None and selftest.nvtx_records_nothing(info.version, parts):
        return Check(
            "python nvtx", "warn", f"{version}: records nothing under nsys {info.version}; use 0.2.11"
        )
    return Check("python nvtx", "ok", f"{version} (emitter: {emitter.EMITTER})")


@dataclass
class TorchFacts:
    """What the torch of this environment says (read in a child process: importing torch here would slow
    every other command that imports this module)."""

    version: str = ""
    cuda: str = ""  # torch.version.cuda: the CUDA the program is built for ("" for a CPU build)
    gpus: list[str] = field(default_factory=list)  # names of the CUDA devices torch sees
    mps: bool = False
    error: str | None = None


def torch_facts() -> TorchFacts:
    code = textwrap.dedent(
        """
        import torch
        print(torch.__version__)
        print(torch.version.cuda or "")
        print(torch.cuda.is_available())
        print(";".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))
        mps = getattr(torch.backends, "mps", None)
        print(bool(mps and mps.is_available()))
        """
    )
    # -P: the working directory off sys.path, as for every child (harness.execution.supervisor.python)
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return TorchFacts(error=(out.stderr.strip().splitlines() or ["no output"])[-1])
    version, cuda, available, names, mps = (out.stdout.splitlines() + [""] * 5)[:5]
    gpus = [n for n in names.split(";") if n] if available == "True" else []
    return TorchFacts(version=version, cuda=cuda, gpus=gpus, mps=mps == "True")


def check_torch(facts: TorchFacts) -> list[Check]:
    if facts.error is not None:
        return [Check("torch", "fail", f"import failed: {facts.error}")]
    devices = ["cpu"] + [f"cuda ({n})" for n in facts.gpus] + (["mps"] if facts.mps else [])
    checks = [Check("torch", "ok", f"{facts.version}; devices: {', '.join(devices)}")]
    if facts.cuda:
        status = "ok" if facts.gpus else "warn"
        detail = facts.cuda if facts.gpus else f"{facts.cuda} (built for CUDA, but no GPU is visible)"
        checks.append(Check("CUDA (torch build)", status, detail))
    else:
        checks.append(Check("CUDA (torch build)", "info", "CPU-only build of torch: no CUDA"))
    return checks


def check_nvml(driver: power.Driver) -> Check:
    if driver.missing is not None:
        status = "warn" if driver.missing.startswith("nvidia-ml-py") else "info"
        return Check("NVML", status, driver.missing)
    cuda = f" (CUDA {driver.cuda})" if driver.cuda else ""
    return Check("NVML", "ok", f"driver {driver.version}{cuda}, {driver.gpus} GPU(s)")


def check_cuda_support(info: NsysInfo | None, facts: TorchFacts, driver: power.Driver) -> Check:
    """The nsys against the program's CUDA (torch's) and the driver's (execution.nsys.cuda_support)."""
    item = "nsys and CUDA"
    if info is None:
        return Check(item, "info", "no nsys to compare")
    program = facts.cuda if facts.gpus else None
    found = assess(info.version, program, driver.cuda, info.newest_cupti)
    if not found:
        why = "torch is a CPU-only build" if not facts.cuda else "torch sees no GPU"
        return Check(item, "info", f"nothing to compare: {why} and NVML reports no driver")
    worst = min(found, key=lambda s: ("none", "partial", "ok").index(s.verdict))
    status = {"ok": "ok", "partial": "warn", "none": "fail"}[worst.verdict]
    return Check(item, status, "; ".join(dict.fromkeys(s.line for s in found)))


def check_gpu(info: NsysInfo | None, facts: TorchFacts, run: bool) -> list[Check]:
    """The GPU self-test (harness.experiments.selftest) where torch sees a GPU; else why it did not
    run."""
    if not run:
        return [Check(ITEM, "info", "not run (--no-self-test)")]
    if not facts.gpus:
        why = (
            f"torch {facts.version} is a CPU-only build" if facts.version and not facts.cuda
            else f"torch {facts.version} (CUDA {facts.cuda}) sees no GPU" if facts.version
            else "torch did not import"
        )  # fmt: skip
        return [
            Check(
                ITEM,
                "info",
                f"not run: no GPU ({why}). On a machine with one it profiles a kernel, a cuBLAS matrix "
                "product and a CUDA graph replay and checks each is in the export with its launch call and "
                "a name",
            )
        ]
    if info is None:
        return [Check(ITEM, "fail", "skipped: no nsys")]
    return [Check(*row) for row in selftest.gpu_self_test(info)]


def check_db(db: str | None) -> Check:
    """Open the database read-only, as `harness runs` would: is it there, ours, readable, writable?"""

    url = resolve_url(db)
    try:
        store = ResultsStore(db, readonly=True)
        count = store.count_runs()
    except NoDatabase as e:
        return Check("results database", "info" if e.creatable else "fail", str(e))
    except HarnessError as e:
        return Check("results database", "fail", str(e))
    detail = f"{describe_url(url)}: {count:,} run{'' if count == 1 else 's'}"
    if store.file is not None and not os.access(store.file, os.W_OK):
        return Check("results database", "warn", f"{detail}; read-only: new runs cannot be saved there")
    return Check("results database", "ok", detail)


def diagnose(nsys_path: str | None = None, db: str | None = None, run_self_test: bool = True) -> list[Check]:
    checks, info = check_nsys(nsys_path)
    if run_self_test:
        checks.append(self_test(info) if info else Check("self-test", "fail", "skipped: no nsys"))
    checks.append(check_nvtx(info))
    facts, driver = torch_facts(), power.driver()
    checks += check_torch(facts)
    checks.append(check_nvml(driver))
    checks.append(check_cuda_support(info, facts, driver))
    checks += check_gpu(info, facts, run_self_test)
    checks.append(check_db(db))
    return checks


def failed(checks: list[Check]) -> bool:
    """Whether doctor exits 1: the nsys the harness would use is missing, not nsys or incomplete (it would
    record nothing), a self-test failed (NVTX or GPU), the nsys records nothing of this CUDA, or the results
    database cannot be used."""
    decisive = ("self-test", "results database", "nsys and CUDA", ITEM)  # ITEM: "GPU self-test: …" rows too
    return any(c.status == "fail" and (c.item == "nsys" or c.item.startswith(decisive)) for c in checks)


def as_frame(checks: list[Check]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame([(c.item, c.status, c.detail) for c in checks], columns=["Check", "Status", "Detail"])
    df.attrs["wrap"] = ["Detail"]
    return df
