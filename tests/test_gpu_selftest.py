"""The GPU self-test of `harness doctor` and what it says on a machine without a GPU. No GPU here: the
checking logic runs on the H100 capture of the project's own run (nsys 2023.4) made to look like the
self-test's (its phase ranges renamed to the self-test's, the optimizer's launches made graph launches),
whole and with what nsys loses taken out of it."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from export_data import derive
from power_data import ReplayNvml

from analysis.runs import selftest
from analysis.trace.opening import open_trace
from harness.energy import power
from harness.execution import nsys
from harness.experiments import doctor

FORWARD, BACKWARD, OPTIMIZER = 970, 1011, 1024  # StringIds of the H100 export's phase names
H100 = doctor.TorchFacts(version="2.11.0+cu130", cuda="13.0", gpus=["NVIDIA H100 80GB HBM3"])
CPU = doctor.TorchFacts(version="2.13.0+cpu", cuda="")
DRIVER = power.Driver(version="580.159.04", cuda="13.0", gpus=1)


def as_self_test(h100: Path, dst: Path, *more: str) -> Path:
    """The H100 export with the self-test's ranges: forward holds the kernels, backward the cuBLAS products,
    and the optimizer's kernels are launched by cudaGraphLaunch."""
    con = sqlite3.connect(h100)
    new = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    con.close()
    k, c, g = (e.range for e in selftest.EXPECTED)
    return derive(
        h100, dst,
        f"UPDATE StringIds SET value = '{k}' WHERE id = {FORWARD}",
        f"UPDATE StringIds SET value = '{c}' WHERE id = {BACKWARD}",
        f"UPDATE StringIds SET value = '{g}' WHERE id = {OPTIMIZER}",
        f"INSERT INTO StringIds VALUES ({new}, 'cudaGraphLaunch_v10000')",
        f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = {new} WHERE correlationId IN (SELECT correlationId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL) AND EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.textId = "
        f"{OPTIMIZER} AND CUPTI_ACTIVITY_KIND_RUNTIME.start BETWEEN n.start AND n.end)",
        *more,
    )  # fmt: skip


@pytest.fixture(scope="module")
def whole(h100_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return as_self_test(h100_export, tmp_path_factory.mktemp("selftest") / "whole.sqlite")


GRAPH_NAMED = (  # the graph's kernels named as a forward kernel (nsys 2023.4 left the optimizer's unnamed)
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = (SELECT demangledName "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName IN "
    "(SELECT id FROM StringIds WHERE value LIKE 'void at::native::%') LIMIT 1) "
    "WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
    "WHERE nameId = (SELECT id FROM StringIds WHERE value = 'cudaGraphLaunch_v10000'))"
)


def test_the_h100_capture_as_a_self_test(whole: Path, tmp_path: Path) -> None:
    seen = selftest.check_all(open_trace(whole, cache=False))
    assert [s.ok for s in seen] == [True, True, False], seen
    assert seen[0].detail.startswith("9,031 kernel(s), e.g. void at::native::")
    assert "sm80_xmma_gemm" in seen[1].detail and "launched by cudaLaunchKernelExC" in seen[1].detail
    # what nsys 2023.4 did to the optimizer's kernels of this CUDA 13 run: none named
    assert seen[2].detail == "1,848 kernel(s) inside 'doctor:graph', none named: nsys wrote [Unknown]"
    named = selftest.check_all(open_trace(derive(whole, tmp_path / "named.sqlite", GRAPH_NAMED), cache=False))
    assert [s.ok for s in named] == [True, True, True], named
    assert named[2].detail.startswith("1,848 kernel(s), e.g. void at::native::")
    assert named[2].detail.endswith("launched by cudaGraphLaunch_v10000")


LOST = {
    # nsys 2022.4 on the H100: CUDA API calls, no kernels
    "kernels": ("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL", "lost: {n} cudaLaunch/cuLaunch call(s) inside "
                "'doctor:kernel', no kernel recorded"),
    "launch calls": ("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME",
                     "lost: no cudaLaunch/cuLaunch call inside 'doctor:kernel' (the CUDA API trace lost it)"),
    "names": ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = (SELECT id FROM StringIds WHERE value "
              "= '[Unknown]')", "9,031 kernel(s) inside 'doctor:kernel', none named: nsys wrote [Unknown]"),
    "NVTX": ("DELETE FROM NVTX_EVENTS",
             "no NVTX range 'doctor:kernel' in the export: nsys recorded no NVTX of it"),
}  # fmt: skip


@pytest.mark.parametrize("lost", list(LOST))
def test_what_nsys_lost_is_named(whole: Path, tmp_path: Path, lost: str) -> None:
    sql, said = LOST[lost]
    broken = derive(whole, tmp_path / "broken.sqlite", sql)
    seen = selftest.check_all(open_trace(broken, cache=False))
    assert not any(s.ok for s in seen)
    calls = (
        sqlite3.connect(whole)
        .execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId JOIN "
            f"NVTX_EVENTS n ON n.textId = {FORWARD} AND r.start BETWEEN n.start AND n.end "
            "WHERE s.value LIKE 'cudaLaunch%' OR s.value LIKE 'cuLaunch%'"
        )
        .fetchone()[0]
    )
    assert seen[0].detail == said.format(n=f"{calls:,}")


def test_cublas_needs_a_matrix_product(whole: Path, tmp_path: Path) -> None:
    gemm = (
        "UPDATE StringIds SET value = 'elementwise' WHERE value LIKE '%gemm%' "
        "OR (value LIKE '%cublas%' AND value NOT LIKE 'doctor:%')"
    )
    seen = selftest.check_all(open_trace(derive(whole, tmp_path / "nogemm.sqlite", gemm), cache=False))
    assert [s.ok for s in seen][:2] == [True, False]
    assert seen[1].detail.startswith("no kernel named like gemm|gemv|cublas inside 'doctor:cublas'")


def test_doctor_runs_the_gpu_self_test_on_a_gpu(whole: Path, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:  # fmt: skip
    """On a GPU the doctor profiles the self-test program; here nsys "records" the H100 export."""
    ran: list[list[str]] = []

    def profile(info, opts, target, env=None, cleanup=()):  # type: ignore[no-untyped-def]
        ran.append([*opts.trace, Path(target[-1]).read_text()])
        export = shutil.copy(whole, tmp_path / "gpu-self-test.sqlite")
        return nsys.ProfileResult(returncode=0, rep=None, sqlite=Path(export), qdstrm=None, stderr_tail="")

    monkeypatch.setattr(nsys, "profile", profile)
    whole = derive(whole, tmp_path / "named.sqlite", GRAPH_NAMED)
    info = nsys.NsysInfo(path=Path("/x/nsys"), version="2025.3.2", flags=frozenset(), source="t")
    rows = doctor.check_gpu(info, H100, run=True)
    assert [(r.item, r.status) for r in rows] == [
        ("GPU self-test: a kernel", "ok"), ("GPU self-test: a cuBLAS matrix product", "ok"),
        ("GPU self-test: a CUDA graph replay", "ok"),
    ]  # fmt: skip
    assert ran[0][:3] == ["cuda", "nvtx", "osrt"] and "graph.replay()" in ran[0][3] and "x @ x" in ran[0][3]
    assert not doctor.failed(rows)
    broken = [doctor.Check(r.item, "fail", "lost") for r in rows]
    assert doctor.failed(broken)


def test_without_a_gpu_the_doctor_says_why_it_did_not_run() -> None:
    info = nsys.NsysInfo(path=Path("/x/nsys"), version="2023.4.4.54", flags=frozenset(), source="t")
    (row,) = doctor.check_gpu(info, CPU, run=True)
    assert (row.item, row.status) == ("GPU self-test", "info")
    assert row.detail.startswith("not run: no GPU (torch 2.13.0+cpu is a CPU-only build). On a machine")
    (row,) = doctor.check_gpu(info, doctor.TorchFacts(version="2.11.0+cu130", cuda="13.0"), run=True)
    assert row.detail.startswith("not run: no GPU (torch 2.11.0+cu130 (CUDA 13.0) sees no GPU)")
    assert not doctor.failed([row])


@pytest.mark.parametrize(
    ("version", "status"), [("2022.4.2.1", "fail"), ("2023.4.4.54", "warn"), ("2025.3.2", "ok")]
)
def test_doctor_compares_the_nsys_with_this_cuda(version: str, status: str) -> None:
    info = nsys.NsysInfo(path=Path("/x/nsys"), version=version, flags=frozenset(), source="t")
    row = doctor.check_cuda_support(info, H100, DRIVER)
    assert row.status == status
    assert row.detail.startswith(f"nsys {version} was made for CUDA")
    assert doctor.failed([row]) is (status == "fail")
    idle = doctor.check_cuda_support(info, CPU, power.Driver(missing="not available"))
    assert (idle.status, idle.detail) == (
        "info",
        "nothing to compare: torch is a CPU-only build and NVML reports no driver",
    )


def test_the_driver_from_nvml() -> None:
    assert power.driver(ReplayNvml([[(0, 0, 0, 0, 0, 0, 0)]])) == DRIVER
    row = doctor.check_nvml(DRIVER)
    assert (row.status, row.detail) == ("ok", "driver 580.159.04 (CUDA 13.0), 1 GPU(s)")


def test_without_a_gpu_a_missing_nsys_does_not_fail_the_gpu_self_test() -> None:
    # the GPU self-test could not run here with any nsys: its row says why, not "fail"
    (row,) = doctor.check_gpu(None, CPU, run=True)
    assert (row.item, row.status) == ("GPU self-test", "info")
    assert row.detail.startswith("not run: no GPU (torch 2.13.0+cpu is a CPU-only build)")
    (row,) = doctor.check_gpu(None, H100, run=True)
    assert (row.status, row.detail) == ("fail", "skipped: no nsys")
