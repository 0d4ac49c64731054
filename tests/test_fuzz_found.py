"""What tests/test_fuzz.py found, kept as regular tests (issue 22): each is the shrunk failing example,
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
