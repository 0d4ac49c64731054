"""What tests/test_fuzz.py found, kept as regular tests: each is the shrunk failing example,
run as the fuzzer ran it, and then its figure checked where there is one."""

from __future__ import annotations

import pytest
from test_fuzz import NSYS_FIXTURES, check_export_example, check_trace_example

pytestmark = pytest.mark.attack
A100 = NSYS_FIXTURES[0]


def test_a_category_that_is_a_list() -> None:
    """`"cat": []` raised TypeError (unhashable) while events were sorted into frames."""
    check_trace_example("nccl", [("set", 0, "cat", "correlation", [])], False, None, "kernels", False)


def test_duplicated_kernels_leave_no_negative_idle_time() -> None:
    """Every kernel row duplicated (half with no start): idle time per stream was -53,075,352 ns, from
    the gap between a kernel and its own copy."""
    mutations = [
        ("set", "CUPTI_ACTIVITY_KIND_KERNEL", 0, 2, 0, "NULL"),
        ("duplicate", "CUPTI_ACTIVITY_KIND_KERNEL", 0, 1, 0, "NULL"),
    ]
    check_export_example(A100, mutations, None, "breakdown", False)


def test_a_start_of_minus_2_63_is_left_out_not_wrapped() -> None:
    """Kernel starts of -2**63 (one past the NULL sentinel): end - start wrapped round int64 and the launch
    table's KAvg was -9.2e18 ns."""
    mutations = [("set", "CUPTI_ACTIVITY_KIND_KERNEL", 0, 1, 0, "-9223372036854775808")]
    check_export_example(A100, mutations, None, "launch", False)


def test_times_past_2_62_are_left_out_and_counted(tmp_path) -> None:
    from export_data import derive

    from analysis.tables.kernels import kernel_summary
    from analysis.trace.opening import open_trace

    bad = derive(
        A100,
        tmp_path / "bad.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775808 WHERE correlationId = 140",
    )
    table = kernel_summary(open_trace(bad, cache=False))
    assert table["Instances"].tolist() == [4] and table["Total Time (ns)"].tolist() == [
        88_573_480 - 17_704_808
    ]
    assert any(n.startswith("left out 1 of 5 kernels") for n in table.attrs["notes"])
    rows = open_trace(bad, cache=False).frame("kernels", ["start", "end"])  # start and end: the range check
    assert len(rows) == 4


def test_breakdown_when_every_runtime_call_is_left_out() -> None:
    """The runtime table's start column dropped: every call is left out, and the launch lookup indexed an
    empty array (IndexError)."""
    mutations = [("drop_column", "CUPTI_ACTIVITY_KIND_RUNTIME", 0, 1, 0, "NULL")]
    check_export_example(A100, mutations, None, "breakdown", False)


def test_memory_sizes_without_a_byte_count() -> None:
    """The memset table's bytes column dropped: its NULL sentinel became an average of -9.2e12 MB."""
    mutations = [
        ("drop_column", "CUPTI_ACTIVITY_KIND_MEMSET", 2, 1, 0, "NULL"),
        ("drop_column", "CUPTI_ACTIVITY_KIND_MEMSET", 17, 1, 0, "NULL"),
        ("drop_table", "CUPTI_ACTIVITY_KIND_KERNEL", 0, 1, 0, "NULL"),
    ]
    check_export_example(NSYS_FIXTURES[1], mutations, None, "memops", False)


def test_nvtx_with_text_in_start() -> None:
    """NVTX starts of 'soon': the last time (for ranges never closed) was max(start), which SQLite made the
    text, and int('soon') raised ValueError."""
    mutations = [("set", "NVTX_EVENTS", 0, 1, 0, "'soon'")]
    check_export_example(A100, mutations, None, "nvtx", False)


def test_os_runtime_durations_past_2_62_are_left_out(tmp_path) -> None:
    """Every OS runtime call's end set to 2**63 - 1: osrt reads durations alone, which had no range check,
    and the int64 sums wrapped round (Time (%) -23,579,871.2)."""
    from export_data import derive

    from analysis.tables.osrt import osrt_summary
    from analysis.trace.opening import open_trace

    cpu_train = next(f for f in NSYS_FIXTURES if f.parent.name == "cpu-train")
    mutations = [("set", "OSRT_API", 1, 1, 0, "9223372036854775807")]
    check_export_example(cpu_train, mutations, None, "osrt", False)
    bad = derive(
        cpu_train,
        tmp_path / "bad.sqlite",
        "UPDATE OSRT_API SET end = 9223372036854775807 WHERE rowid % 2 = 0",
    )
    table = osrt_summary(open_trace(bad, cache=False))
    left = [n for n in table.attrs["notes"] if "duration past 2**62" in n]
    assert left == [
        "left out 5,454 of 10,908 OS runtime calls with a duration past 2**62 ns (146 years): not a time"
    ]
    assert table["Num Calls"].sum() == 10_908 - 5_454 and (table["Time (%)"] >= 0).all()


def test_os_runtime_durations_that_add_up_past_2_63_stop_the_table() -> None:
    """Every OS runtime call's end set to 10**18: each duration within 2**62, but their total wrapped round
    int64 (Total Time -1,446,744,111,590,443,473 ns, Time (%) -2.4); now one line."""
    cpu_train = next(f for f in NSYS_FIXTURES if f.parent.name == "cpu-train")
    mutations = [("set", "OSRT_API", 1, 1, 0, "1000000000000000000")]
    check_export_example(cpu_train, mutations, None, "osrt", False)


def test_kernels_and_calls_without_correlation_ids_are_not_joined() -> None:
    """The kernels' and the runtime calls' correlationId columns dropped (every id NULL): the block-wise
    launch-call join took the 95 calls of the wanted NULL id into room for one (ValueError)."""
    mutations = [
        ("drop_column", "CUPTI_ACTIVITY_KIND_KERNEL", 5, 1, 0, "NULL"),
        ("drop_column", "CUPTI_ACTIVITY_KIND_RUNTIME", 4, 1, 0, "NULL"),
    ]
    check_export_example(A100, mutations, None, "nvtx-gpu", False)


def test_a_kernel_without_a_correlation_id_has_no_launch_call(tmp_path) -> None:
    """A kernel whose correlationId is NULL has no call. Its join key (the id shifted past the process
    bits) wrapped onto id 1's: with another kernel launched by the call of id 1, the kernel without an id
    took that call too."""
    from export_data import derive

    from analysis.joins.runtime import kernel_launches
    from analysis.readers import NULL
    from analysis.trace.opening import open_trace

    bad = derive(
        A100,
        tmp_path / "bad.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid = 1",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 1 WHERE rowid = 2",
    )
    launches = kernel_launches(open_trace(bad, cache=False))
    by_id = dict(zip(launches["correlation_id"].tolist(), launches["has_call"].tolist(), strict=True))
    assert by_id == {NULL: False, 1: True, 172: True, 188: True, 204: True}


@pytest.mark.parametrize(
    ("shape", "key", "arg"),
    [
        (("long", 3 << 20), "name", ""),  # past the (lowered) limit on one value: MemoryError at 2 GB
        (("long", 3 << 20), "id", ""),  # a top-level value
        (("digits", 5000), "ts", ""),  # ValueError: Exceeds the limit (4300 digits)
        (("digits", 5000), "args", "Input Dims"),
        (("deep", 1000), "args", "correlation"),  # RecursionError from msgspec
        (("deep", 995), "name", ""),  # ... or from json.dumps of a name that is a list
        (("shapes", 2000), "", ""),  # the shape cache cleared by one thread while another read it: KeyError
        (("colliding", 2000), "", ""),  # one chain of the C reader's name table
        (("thread name", "1.5"), "", ""),  # "thread 4" from the C reader, "1.5" from msgspec
    ],
)
@pytest.mark.parametrize("threads", [False, True])
def test_hostile_shapes(shape: tuple, key: str, arg: str, threads: bool) -> None:
    """The hostile shapes the fuzzer makes (HOSTILE_SHAPES), each once: a table or one line."""
    for command in ("kernels", "summary"):
        check_trace_example("nccl", [("hostile", 5, key, arg, shape)], True, None, command, True, threads)
