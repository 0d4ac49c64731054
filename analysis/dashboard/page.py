"""Compose the panels into one self-contained HTML page (plotly.js inlined once; works offline)."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from analysis.dashboard.panel import DashboardData, Panel, PanelSpec
from analysis.dashboard.registry import PANELS
from analysis.outputs import write_text
from workloads.names import counted

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}}

CSS = """
body { font-family: system-ui, "Segoe UI", sans-serif; margin: 0; color: #222; background: #fafafa; }
header { padding: 18px 28px 8px; background: #fff; border-bottom: 1px solid #e5e5e5; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 2px 0; color: #666; font-size: 13px; }
nav { padding: 6px 28px 10px; background: #fff; border-bottom: 1px solid #e5e5e5; font-size: 13px; }
nav a { margin-right: 14px; color: #3366aa; text-decoration: none; }
nav a.missing { color: #999; }
main { padding: 10px 28px 40px; }
section.panel { background: #fff; border: 1px solid #e5e5e5; border-radius: 6px; margin: 16px 0;
  padding: 12px 16px; }
section.panel h2 { font-size: 17px; margin: 2px 0 6px; }
p.note { color: #666; font-size: 12px; margin: 2px 0; }
ul.missing { color: #555; font-size: 13px; margin: 4px 0; padding-left: 20px; }
ul.missing li { margin: 3px 0; }
p.failed { color: #a00; background: #fff0f0; border: 1px dashed #d77; padding: 10px 12px; margin: 6px 0; }
code { background: #f0f0f0; padding: 1px 4px; border-radius: 3px; }
"""


@dataclass
class Dashboard:
    path: Path
    panels: list[Panel]
    size_bytes: int
    notes: list[str] = field(default_factory=list)  # what reading its sources said (which export was read)
    warnings: list[str] = field(default_factory=list)  # what the page draws but cannot vouch for

    @property
    def drawn(self) -> list[Panel]:
        return [p for p in self.panels if p.figure is not None]

    @property
    def lacking(self) -> list[Panel]:
        return [p for p in self.panels if p.figure is None]


def build_panels(
    data: DashboardData,
    scope: Literal["all", "profile", "ranks"] = "all",
    specs: Sequence[PanelSpec] = PANELS,
) -> list[Panel]:
    """Run every panel builder in the scope; a builder that raises becomes a panel saying so."""
    panels = []
    for spec in specs:
        if scope != "all" and spec.scope != scope:
            continue
        if scope == "all" and spec.scope == "ranks":
            continue
        try:
            panels.append(spec(data))
        except Exception as e:  # one broken panel must not cost the user the rest of the page
            why = f"this panel failed ({type(e).__name__}: {e}); please report it"
            panels.append(Panel(key=spec.key, title=spec.title, missing=why, failed=True))
    return panels


def _text(message: str) -> str:
    """Escape, and show `command` spans as code."""
    parts = re.split(r"`([^`]*)`", message)
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


def render_html(
    panels: Sequence[Panel], *, title: str, subtitle: str = "", generator: str = "harness dashboard"
) -> str:
    """The panels that have something to show (a figure, or a failure to report) in registry order, then
    one short list at the end of those without data, each with what is missing and the command that fills
    it: a page of ordinary training runs is not a column of empty boxes."""
    import plotly.io as pio

    sections = []
    plotlyjs_done = False
    shown = [p for p in panels if p.figure is not None or p.failed]
    lacking = [p for p in panels if p.figure is None and not p.failed]
    for panel in shown:
        body = []
        if panel.figure is not None:
            body.append(
                pio.to_html(
                    panel.figure,
                    full_html=False,
                    include_plotlyjs=not plotlyjs_done,
                    div_id=f"fig-{panel.key}",
                    config=PLOT_CONFIG,
                )
            )
            plotlyjs_done = True
            state = "figure"
        else:
            body.append(f'<p class="failed">Failed: {_text(panel.missing or "")}</p>')
            state = "failed"
        notes = "".join(f'<p class="note">{_text(n)}</p>' for n in panel.notes)
        sections.append(
            f'<section class="panel" id="panel-{panel.key}" data-panel="{panel.key}" data-state="{state}">'
            f"<h2>{html.escape(panel.title)}</h2>{notes}{''.join(body)}</section>"
        )
    if lacking:
        items = "".join(
            f'<li id="panel-{p.key}" data-panel="{p.key}" data-state="missing">'
            f"<b>{html.escape(_short(p))}</b>: {_text(p.missing or '')}</li>"
            for p in lacking
        )
        sections.append(
            f'<section class="panel" id="not-drawn"><h2>No data yet for {counted(len(lacking), "panel")}</h2>'
            f'<ul class="missing">{items}</ul></section>'
        )
    nav = "".join(f'<a href="#panel-{p.key}" class="drawn">{html.escape(_short(p))}</a>' for p in shown)
    if lacking:
        nav += f'<a href="#not-drawn" class="missing">no data yet ({len(lacking)})</a>'
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{_text(subtitle)}</p>"
        f"<p>Generated {stamp} by <code>{html.escape(generator)}</code>. Axes in ms; hover for exact ns.</p>"
        f"</header><nav>{nav}</nav><main>{''.join(sections)}</main></body></html>\n"
    )


def _short(panel: Panel) -> str:
    return panel.title.split(":")[0]


def write_dashboard(
    data: DashboardData,
    out: Path,
    *,
    scope: Literal["all", "profile", "ranks"] = "all",
    title: str = "harness dashboard",
    specs: Sequence[PanelSpec] = PANELS,
) -> Dashboard:
    """Build the panels and write the page to `out`."""
    panels = build_panels(data, scope, specs)
    text = render_html(panels, title=title, subtitle=data.source)
    size = write_page(out, text)
    page = Dashboard(path=out, panels=panels, size_bytes=size)
    p = data.profile
    drawn = [x.key for x in panels if x.figure is not None and x.title.endswith("failed its health checks)")]
    if p is not None and p.untrusted and drawn:
        page.warnings.append(
            f"{p.label}: its capture failed its health checks ({', '.join(p.failed_checks)}: `harness "
            f"health {p.path}` says more); the page's {', '.join(drawn)} drawn from it say so: their numbers "
            "are not sound"
        )
    return page


def write_page(out: Path, text: str) -> int:
    """Write the page as analysis.outputs writes a file: to a temporary file beside `out`, then renamed
    into place (a full disk or a killed command leaves the old page whole, never a truncated one); `-`, a
    device or a pipe as a stream; the bytes written."""
    return write_text(out, text)
