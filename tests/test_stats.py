"""nsys's statistics: median of even counts, sample standard deviation, rounding, Time (%), row order."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import stats
from analysis.readers import NULL
from analysis.stats import describe, name_codes, order_like_nsys, round_half_up, time_percent


def test_describe_like_nsys() -> None:
    df = pd.DataFrame({"k": ["a", "a", "a", "a", "b"], "duration": [1, 2, 4, 10, 7]})
    out = describe(df, ["k"]).set_index("k")
    assert out.loc["a", "Med (ns)"] == 3.0  # mean of the two middle values
    assert out.loc["a", "Avg (ns)"] == 4.3  # 4.25 rounds half away from zero
    assert out.loc["a", "StdDev (ns)"] == 4.0  # sample (n - 1): sqrt(48 / 3)
    assert out.loc["b", "StdDev (ns)"] == 0.0  # one value
    assert out.loc["a", "Total Time (ns)"] == 17 and out.loc["a", "Instances"] == 4


def test_round_half_up() -> None:
    assert round_half_up([0.25, 2.45, -0.25, 12992.05]).tolist() == [0.3, 2.5, -0.3, 12992.1]
    assert round_half_up([262.1445], 3).tolist() == [262.145]


def test_time_percent_and_order() -> None:
    df = pd.DataFrame({"Total Time (ns)": [1, 3, 3, 0], "name_id": [9, 5, 2, 1]})
    assert time_percent(df["Total Time (ns)"]).tolist() == [14.3, 42.9, 42.9, 0.0]
    ordered = order_like_nsys(df, "Total Time (ns)", ["name_id"])
    assert ordered["name_id"].tolist() == [2, 5, 9, 1]  # ties by string id, like SQLite's GROUP BY


def test_aggregate_in_blocks_equals_one_groupby(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    for groups in (1, 7, 300, 20_000):
        group = pd.factorize(rng.integers(0, groups, 20_000))[0]
        values = rng.integers(1, 10**9, 20_000)
        whole = stats.aggregate(group, values)
        monkeypatch.setattr(stats, "BLOCK", 999)  # whole groups a block at a time, one group past it alone
        pd.testing.assert_frame_equal(stats.aggregate(group, values), whole)
        monkeypatch.undo()


def test_name_codes_one_code_per_name_and_the_smallest_id() -> None:
    ids = np.array([7, 3, 7, 9, 5])  # 3 and 5 name one function; 9 has no name
    names = {3: "cudaMalloc", 5: "cudaMalloc", 7: "cudaLaunchKernel"}
    code, labels, first_id = name_codes(ids, names)
    named = ["cudaLaunchKernel", "cudaMalloc", "cudaLaunchKernel", "cudaMalloc"]
    assert list(labels[code[code >= 0]]) == named
    assert code[3] == -1 and first_id[code[1]] == 3 and first_id[code[0]] == 7
    code, labels, _ = name_codes(ids, names, missing="?")
    assert labels[code[3]] == "?" and len(labels) == 3


def test_member_and_factorize_in_blocks_equal_numpy_and_pandas() -> None:
    from analysis.stats import factorize, member

    rng = np.random.default_rng(3)
    values = rng.integers(-5, 400, 10_000)
    values[::97] = NULL
    wanted = rng.integers(0, 500, 300)
    assert member(values, wanted, block=512).tolist() == np.isin(values, wanted).tolist()
    assert not member(values, np.zeros(0, dtype=np.int64)).any()
    codes, uniques = factorize(values, block=512)  # 20 blocks
    want_codes, want_uniques = pd.factorize(values)
    assert codes.tolist() == want_codes.tolist() and uniques.tolist() == want_uniques.tolist()
    named = pd.Series(["b", None, "a", "b"])  # not integers: pandas as it is, NA a group of its own
    assert factorize(named)[0].tolist() == [0, 1, 2, 0]


def test_durations_by_group_keys_coded_across_blocks_equal_a_groupby() -> None:
    """Launch shapes span far more than a block (their codes are places among the values seen so far, kept
    from block to block): new values in later blocks, values seen before, a key of short span beside it."""
    rng = np.random.default_rng(5)
    n = 30_000
    wide = rng.choice(np.array([3, 10**12, 7 * 10**9, 2**40 + 1, 5 * 10**11]), n)
    wide[n // 2 :] += rng.integers(0, 2, n - n // 2) * 10**6  # values first seen in later blocks
    short = rng.integers(100, 140, n)
    duration = rng.integers(1, 10**6, n)
    blocks = [
        {"wide": wide[lo : lo + 4096], "short": short[lo : lo + 4096], "duration": duration[lo : lo + 4096]}
        for lo in range(0, n, 4096)
    ]
    got = {key: values.tolist() for key, values in stats.durations_by_group(blocks, ["wide", "short"])}
    frame = pd.DataFrame({"wide": wide, "short": short, "duration": duration})
    want = {key: list(group) for key, group in frame.groupby(["wide", "short"], sort=False)["duration"]}
    assert got == want and len(got) > 300
    assert stats.distinct(wide).tolist() == np.unique(wide).tolist() and len(stats.distinct(wide[:0])) == 0


def test_membership_of_a_short_span_leaves_out_the_null_sentinel() -> None:
    values = np.array([NULL, 4, 5, 9, 10, -3, NULL], dtype=np.int64)
    test = stats.membership(np.array([5, 4, 9, 9]), len(values))
    assert test(values).tolist() == np.isin(values, [4, 5, 9]).tolist()


def test_pair_keys_equal_exactly_where_the_pairs_are_equal() -> None:
    pids = np.array([1 << 24, 1 << 24, 2 << 24, 3 << 24], dtype=np.int64)
    ids = np.array([5, 7, 5, NULL], dtype=np.int64)
    other_pids = np.array([2 << 24, 1 << 24, 2 << 24, 3 << 24, 9 << 24], dtype=np.int64)
    other_ids = np.array([5, 5, 7, NULL, 5], dtype=np.int64)
    keys, other = stats.pair_keys(pids, ids, other_pids, other_ids)
    assert stats.member(other, keys).tolist() == [True, True, False, True, False]  # NULL is a value too
    assert len(set(keys.tolist())) == 4
    wide = np.array([0, 2**62], dtype=np.int64)  # ids too far apart to offset: numbered instead
    keys, other = stats.pair_keys(np.array([1, 2]), wide, np.array([2, 1, 1]), np.array([2**62, 0, 2**62]))
    assert stats.member(other, keys).tolist() == [True, True, False]
