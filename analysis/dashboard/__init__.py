"""Plotly dashboards built from the results store and Nsight Systems exports.

Figures are built from tables (pure DataFrame -> Figure functions in one module per panel group); the
registry lists the panels in page order; the page composer writes one self-contained HTML file.
"""

from __future__ import annotations

from analysis.dashboard.load import collect, collect_export, load_profile
from analysis.dashboard.page import Dashboard, build_panels, render_html, write_dashboard
from analysis.dashboard.panel import DashboardData, Panel, PanelSpec, Profile
from analysis.dashboard.registry import PANELS
from analysis.dashboard.style import PHASE_COLORS

__all__ = [
    "PANELS",
    "PHASE_COLORS",
    "Dashboard",
    "DashboardData",
    "Panel",
    "PanelSpec",
    "Profile",
    "build_panels",
    "collect",
    "collect_export",
    "load_profile",
    "render_html",
    "write_dashboard",
]
