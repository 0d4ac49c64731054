"""The Kineto reader on the traces under a folder (a GPU check's torch.profiler traces): whether the C reader
is built and took every piece, whether its frames equal msgspec's, and how long each took.

    python scripts/kineto_check.py FOLDER

Prints one line per trace; exits 1 where the frames differ.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

import analysis.readers.kineto_columns as columns
import analysis.readers.kineto_pool as pool
from analysis.readers.kineto import open_kineto


def read(path: Path) -> tuple[dict[str, pd.DataFrame], float]:
    start = time.perf_counter()
    reader = open_kineto(path)
    return reader._frames, time.perf_counter() - start


def main() -> int:
    folder = Path(sys.argv[1])
    fast = columns._kineto_fast
    print(f"C reader: {'built' if fast is not None else 'not built'} ({fast.__file__ if fast else '-'})")
    traces = sorted(p for p in folder.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))
    failed = refused = 0
    for path in traces:
        taken = [0, 0]
        if fast is not None:
            real = fast.columns

            def counted(
                data: object, body: bool = False, real: object = real, taken: list[int] = taken
            ) -> object:
                out = real(data, body)  # type: ignore[operator]
                taken[0] += 1
                taken[1] += out is not None
                return out

            fast.columns = counted  # type: ignore[attr-defined]
        try:
            with_c, t_c = read(path)
        except Exception:  # JSON that is not a trace (a cache's metadata, a package's): counted
            refused += 1
            continue
        finally:
            if fast is not None:
                fast.columns = real  # type: ignore[attr-defined]
        columns._kineto_fast, pool.FAST = None, False
        try:
            without, t_m = read(path)
        finally:
            columns._kineto_fast, pool.FAST = fast, fast is not None
        same = with_c.keys() == without.keys()
        for name in with_c:
            try:
                pd.testing.assert_frame_equal(with_c[name], without.get(name), obj=name)
            except AssertionError as e:
                same = False
                print(f"  {name} differs: {str(e).splitlines()[0]}")
        failed += not same
        kernels = len(with_c.get("kernels", ()))
        size = path.stat().st_size / 1e6
        print(
            f"{path.name}: {size:.1f} MB file, {kernels} kernels; pieces read in C {taken[1]} of {taken[0]}; "
            f"C {t_c:.3f} s, msgspec {t_m:.3f} s; frames {'equal' if same else 'DIFFER'}"
        )
    print(f"{len(traces) - refused} traces, {failed} with frames that differ; {refused} other JSON files")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
