"""The page composer: one self-contained HTML file, the panel registry, size on a huge profile."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dashboard_data import fill

from analysis.dashboard import PANELS, DashboardData, Panel, PanelSpec, Profile, collect, write_dashboard
from analysis.dashboard.page import build_panels, render_html
from harness.store.results import ResultsStore


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DashboardData:
    store = ResultsStore(str(tmp_path_factory.mktemp("db") / "results.sqlite"))
    fill(store)
    return collect(store)


def test_page_inlines_plotly_once_and_loads_nothing_from_the_network(
    data: DashboardData, tmp_path: Path
) -> None:
    page = write_dashboard(data, tmp_path / "d.html")
    text = page.path.read_text()
    assert len(re.findall(r"plotly\.js v\d", text)) == 1
    assert not re.search(r"<script[^>]+src=", text)
    assert page.size_bytes == len(text.encode())
    drawn = {p.key for p in page.drawn}
    assert drawn == {"phases", "steps", "overhead", "agreement", "throughput", "compare"}
    for key in drawn:
        assert f'id="fig-{key}"' in text and f'data-panel="{key}" data-state="figure"' in text


def test_missing_panels_say_what_and_how(data: DashboardData) -> None:
    text = render_html(build_panels(data), title="t")
    item = re.search(r'<li[^>]*data-panel="kernels" data-state="missing"[^>]*>(.*?)</li>', text).group(1)
    assert "no profiled run" in item and "<code>harness run tiny --nsys</code>" in item


def test_panels_with_data_first_and_the_rest_in_one_list_at_the_end(data: DashboardData) -> None:
    """A database of ordinary runs draws its panels, then one short list of the others, each
    with the command that fills it; no empty boxes between the figures."""
    panels = build_panels(data)
    text = render_html(panels, title="t")
    lacking = [p for p in panels if p.figure is None]
    drawn = [p.key for p in panels if p.figure is not None]
    # every figure comes before the list, in registry order
    figures = [
        m.group(1) for m in re.finditer(r'<section[^>]*data-panel="([^"]+)" data-state="figure"', text)
    ]
    assert figures == drawn
    assert "Missing:" not in text and '<section class="panel" id="panel-kernels"' not in text
    tail = text[text.index('id="not-drawn"') :]
    assert all(f'id="fig-{k}"' not in tail for k in drawn)
    assert f"No data yet for {len(lacking)} panels" in tail
    items = re.findall(r'<li id="panel-([^"]+)" data-panel="[^"]+" data-state="missing">(.*?)</li>', tail)
    assert [k for k, _ in items] == [p.key for p in lacking]
    assert all("<code>harness " in body for _, body in items)  # each says the command that fills it
    nav = re.search(r"<nav>(.*?)</nav>", text).group(1)
    assert nav.endswith(f'<a href="#not-drawn" class="missing">no data yet ({len(lacking)})</a>')
    one = render_html([Panel(key="x", title="X", missing="run `harness run tiny`")], title="t")
    assert "No data yet for 1 panel<" in one


def test_profile_scope_keeps_profile_panels_only(data: DashboardData) -> None:
    panels = build_panels(data, scope="profile")
    assert [p.key for p in panels] == ["kernels", "nvtx", "timeline"]


def test_a_new_panel_plugs_in_through_the_registry(data: DashboardData) -> None:
    import plotly.graph_objects as go

    def memory(d: DashboardData) -> Panel:
        return Panel(figure=go.Figure(go.Bar(x=["tiny"], y=[len(d.runs)])))

    def broken(d: DashboardData) -> Panel:
        raise KeyError("peak_memory_bytes")

    specs = [*PANELS, PanelSpec("memory", "Peak memory", memory), PanelSpec("energy", "Energy", broken)]
    panels = build_panels(data, specs=specs)
    assert panels[-2].key == "memory" and panels[-2].figure.data[0].y == (7,)
    assert panels[-1].failed and "KeyError" in panels[-1].missing
    text = render_html(panels, title="t")
    assert 'data-panel="memory" data-state="figure"' in text and 'data-state="failed"' in text


def test_million_kernel_profile_stays_under_20_mb(tmp_path: Path) -> None:
    n = 1_000_000
    rng = np.random.default_rng(0)
    starts = np.cumsum(rng.integers(1_000, 5_000, n))
    events = pd.DataFrame(
        {
            "kind": "kernel",
            "name": [f"kernel_{i % 3000}_void_at::native::elementwise<float>" for i in range(n)],
            "start_ns": starts,
            "end_ns": starts + rng.integers(500, 3_000, n),
            "lane": "stream 7",
        }
    )
    names = events["name"].unique()
    kernels = pd.DataFrame(
        {"Name": names, "Total Time (ns)": np.arange(len(names)) * 1000 + 1, "Instances": n // len(names)}
    )
    prof = Profile(label="huge", path="huge.sqlite", kernels=kernels, events=events)
    page = write_dashboard(DashboardData(profile=prof), tmp_path / "huge.html", scope="profile")
    assert {p.key for p in page.drawn} == {"kernels", "timeline"}
    assert page.size_bytes < 20 * 2**20
