"""Launch latency against kernexecsum, which counts each launch twice in the A100 export."""

from __future__ import annotations

from pathlib import Path

from export_data import as_printed, oracle

from analysis.tables.launch import launch_summary
from analysis.trace.opening import open_trace


def test_kernexecsum_oracle_counted_once(a100_export: Path, a100_expected: Path) -> None:
    ours = as_printed(launch_summary(open_trace(a100_export))).iloc[0]
    theirs = oracle(a100_expected, "kernexecsum").iloc[0]
    assert list(ours.index) == list(theirs.index)
    assert ours["Count"] == 5 and theirs["Count"] == 10
    # kernel times do not depend on which twin launched them
    for col in ("KAvg (ns)", "KMed (ns)", "KMin (ns)", "KMax (ns)", "TMax (ns)", "AMax (ns)", "QMin (ns)"):
        assert ours[col] == theirs[col], col
    assert ours["KStdDev (ns)"] == 12992.1  # as gpukernsum; nsys's 12249.0 is of the doubled list
    for col in ("PID", "TID", "DevId", "API Name", "Kernel Name"):
        assert ours[col] == theirs[col]
    # the plain cudaLaunchKernel calls: 162,714 ns over 5 calls (cudaapisum)
    assert ours["AAvg (ns)"] == 32542.8
    assert ours["QCount"] == 3  # two kernels started before their call returned
