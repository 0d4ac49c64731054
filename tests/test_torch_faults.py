"""A torch.profiler trace cut short: recorded as partial, not as kept, and not analysed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from kineto_data import trace_path
from test_store import make_result

from analysis.readers.kineto import is_complete
from harness.core.records import RunConfig
from harness.profilers.torch import TorchOptions, profile_run
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack(saves=True)


def test_is_complete_tells_whole_traces_from_cut_ones(tmp_path: Path) -> None:
    whole = trace_path("nccl").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": []}))
    half = tmp_path / "half.json"
    half.write_text('{"traceEvents": [{"ph": "X"')
    assert is_complete(trace_path("nccl")) and is_complete(plain)
    assert not is_complete(cut) and not is_complete(half) and not is_complete(tmp_path / "none")
    cut_json = tmp_path / "cutjson.json.gz"  # a whole gzip stream of JSON cut short
    cut_json.write_bytes(gzip.compress(b'{"traceEvents": [1, 2'))
    assert not is_complete(cut_json)


@pytest.mark.parametrize("cut", [True, False], ids=["cut-short", "whole"])
def test_an_interrupted_run_records_its_trace_as_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: bool
) -> None:
    def interrupted(config: RunConfig, run_id: str, profiler: dict, **_: object) -> object:
        trace = Path(profiler["trace"])
        data = trace_path("nccl").read_bytes()
        trace.write_bytes(data[: len(data) // 3] if cut else data)
        result = make_result(run_id)
        result.status, result.error = "interrupted", "interrupted by SIGINT after 3 of 5 measured steps"
        return result

    monkeypatch.setattr("harness.profilers.torch.run_isolated", interrupted)
    store = ResultsStore(str(tmp_path / "r.sqlite"))
    out = profile_run(RunConfig(model="tiny"), TorchOptions(profile_dir=tmp_path / "p"), store=store)
    run = store.get(out.run_id)
    kind = "trace_partial" if cut else "trace"
    assert run.artifacts == {kind: str(out.trace)}
    assert ("cut short, kept as partial" in out.error) is cut
    assert out.exit_code == 130
