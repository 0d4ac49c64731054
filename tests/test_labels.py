"""Names tested once per distinct name (analysis.advice.labels): the same rows as a test of every row's
string, for categorical and plain columns, missing names passing none."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.advice.labels import label_codes, label_in, label_test, labels_of


def test_label_in_equals_every_row_as_a_string() -> None:
    names = ["forward", "aten::mm", None, "backward", "forward", "step"]
    for column in (pd.Series(names, dtype="category"), pd.Series(names, dtype=object)):
        rows = label_in(column, {"forward", "step"})
        assert rows.tolist() == [True, False, False, False, True, True]
        assert rows.tolist() == column.astype(str).isin(["forward", "step"]).tolist()
        assert labels_of(column, rows).tolist() == ["forward", "forward", "step"]


def test_label_test_and_codes_leave_a_missing_name_out() -> None:
    column = pd.Series(["GPU", None, "CPU", "GPU"], dtype=object)
    assert label_test(column, lambda labels: labels == "GPU").tolist() == [True, False, False, True]
    codes, labels = label_codes(column)
    assert codes.tolist() == [0, -1, 1, 0] and list(labels) == ["GPU", "CPU"]
    assert label_test(pd.Series([], dtype="category"), lambda labels: labels == "x").tolist() == []
    missing = pd.Series([None, None], dtype=object)
    assert np.asarray(label_in(missing, {"None", "nan"})).tolist() == [False, False]
