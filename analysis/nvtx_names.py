"""PyTorch's NVTX range names, grouped by operator.

Under `torch.autograd.profiler.emit_nvtx` PyTorch names each range after its operator and appends
`, seq = N`, `, op_id = N`, with `record_shapes` `, sizes = [[...], ...]`, and `, input_op_ids = [...]`:
`aten::to, seq = 46176, op_id = 993781`. Every name is then unique, so nothing adds up by name. Grouping:

- "op": the operator alone (`aten::to`), as torch.profiler's `key_averages()` groups;
- "shape": the operator and its input sizes (`aten::to, sizes = [[8, 64]]`), as `group_by_input_shape`;
- "raw": the names as recorded (what `nsys stats` prints).

Names that carry none of those fields are their own group in every mode.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

GROUPINGS = ("op", "shape", "raw")
_FIELD = re.compile(r", (?:seq|op_id|sizes|input_op_ids) = ")
_SIZES = re.compile(r", sizes = (\[.*?\]\])(?:, input_op_ids = |$)|, sizes = (\[\])(?:, |$)")

GROUPING_LINE = {
    "op": "NVTX ranges grouped by operator (PyTorch's `, seq = N, op_id = N` fields dropped; "
    "--by shape adds input sizes, --raw-names keeps the names as recorded)",
    "shape": "NVTX ranges grouped by operator and input sizes (--by op: by operator alone)",
    "raw": "NVTX ranges by name as recorded (default: grouped by operator)",
}


def group_name(name: str, by: str = "op") -> str:
    """The name `name` is counted under in the grouping `by`."""
    if by == "raw":
        return name
    cut = _FIELD.search(name)
    if cut is None:
        return name
    op = name[: cut.start()]
    if by == "shape":
        sizes = _SIZES.search(name)
        if sizes is not None:
            return f"{op}, sizes = {sizes.group(1) or sizes.group(2)}"
    return op


def group_names(names: pd.Series, by: str = "op") -> pd.Series:
    """group_name of each of `names`, computed once per distinct name."""
    if by == "raw":
        return names
    distinct = pd.unique(names.to_numpy())
    mapping = {n: group_name(n, by) if isinstance(n, str) else n for n in distinct}
    return names.map(mapping)


def has_fields(names: pd.Series) -> bool:
    """Whether any of `names` carries PyTorch's per-call fields (so the grouping changes the table)."""
    return bool(names.astype(str).str.contains(_FIELD).any()) if len(names) else False


def check_grouping(by: str) -> str:
    if by not in GROUPINGS:
        raise ValueError(f"unknown NVTX grouping {by!r}: {', '.join(GROUPINGS)}")
    return by


def grouped_categories(names: pd.Series | pd.Categorical, by: str = "op") -> tuple[pd.Categorical, bool]:
    """`names` as a Categorical of their groups, and whether any name carries PyTorch's fields. Works on
    the distinct names only (1.8M ranges have a few thousand), and keeps missing names missing."""
    check_grouping(by)
    cat = names if isinstance(names, pd.Categorical) else pd.Categorical(names)
    texts = [str(c) for c in cat.categories]
    fields = any(_FIELD.search(t) is not None for t in texts)
    if by == "raw" or not fields:
        return cat, fields
    codes, labels = pd.factorize(pd.Index([group_name(t, by) for t in texts]))
    new = np.where(cat.codes >= 0, codes[np.maximum(cat.codes, 0)] if len(codes) else -1, -1)
    return pd.Categorical.from_codes(new, categories=labels), fields


def grouping_notes(fields: bool, by: str) -> list[str]:
    """The one line that says how a table's NVTX names are grouped, where the grouping changes them."""
    return [GROUPING_LINE[by]] if fields else []
