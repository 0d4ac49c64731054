"""What the commands load only when they run: the one place the CLI defers imports.

`harness` imports just the command module a command line names (harness/cli/__init__.py), and `harness
--help` imports them all; these names pull in pandas and pyarrow (the analysis modules), SQLAlchemy (the
results store) or plotly (the pages), which would cost every command their start-up (a warm `harness kernels`
never loads SQLAlchemy: tests/test_cache.py). A command writes `lazy.NAME`; the module holding NAME is
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that holds it
WHERE = {
    "cached": "analysis.trace.results",
    "keep": "analysis.trace.results",
    "Kept": "analysis.trace.results",
    "kernel_table": "analysis.tables.kernels",
    "KERNEL_DECIDING": "analysis.tables.kernels",
    "kernels_title": "analysis.tables.kernels",
    "window_of": "analysis.views.chrome_trace",
    "write_chrome_trace": "analysis.views.chrome_trace",
    "breakdown": "analysis.hta.breakdown",
    "operators": "analysis.tables.operators",
    "Thresholds": "analysis.advice.findings",
    "findings": "analysis.advice.findings",
    "findings_table": "analysis.advice.findings",
    "findings_frame": "analysis.advice.record",
    "FAIL": "analysis.advice.health",
    "capture_failures": "analysis.advice.checks",
    "capture_health": "analysis.advice.health",
    "Skipped": "analysis.advice.nsys_rules",
    "parse_rule": "analysis.advice.nsys_rules",
    "run_rule": "analysis.advice.nsys_rules",
    "Cache": "analysis.trace.cache",
    "parse_size": "analysis.trace.cache",
    "TOP": "analysis.dashboard.diff",
    "diff_panels": "analysis.dashboard.diff",
    "write_diff_page": "analysis.dashboard.diff",
    "gate_failures": "analysis.compare.diff",
    "verdict_table": "analysis.compare.diff",
    "diff_exports": "analysis.compare.export_diff",
    "gate_failed": "analysis.compare.export_diff",
    "expand": "analysis.trace.multi",
    "TABLES": "analysis.tables.tables",
    "Tables": "analysis.tables.tables",
    "deciding": "analysis.tables.tables",
    "RENDERERS": "harness.cli.render",
    "finish": "harness.cli.render",
    "advice_tables": "harness.cli.render",
    "say_health": "harness.cli.render",
    "say_findings": "harness.cli.render",
    "run_advice": "harness.experiments.advice",
    "profiler": "harness.profilers.registry",
    "as_frame": "harness.experiments.doctor",
    "diagnose": "harness.experiments.doctor",
    "doctor_failed": "harness.experiments.doctor",
    "measure_overhead": "harness.experiments.overhead",
    "profile_program": "harness.experiments.program",
    "analyse_many": "harness.experiments.reports",
    "exports_dir": "harness.experiments.opening",
    "files_read": "harness.experiments.opening",
    "open_report": "harness.experiments.opening",
    "ProfileRequest": "harness.profilers.nsys",
    "nsys_cuda_check": "harness.profilers.nsys",
    "TorchRequest": "harness.profilers.torch",
    "ResultsStore": "harness.store.results",
    "UnsavedRun": "harness.store.results",
    "describe_url": "harness.store.results",
}

ALIASES = {
    "profiler": "get",
    "KERNEL_DECIDING": "DECIDING",
    "kernels_title": "title",
    "nsys_cuda_check": "cuda_check_for",
    "doctor_failed": "failed",
}  # a name here -> its name in its module
MODULES = {"breakdown", "operators"}  # names that are the module itself

if TYPE_CHECKING:
    pass


def __getattr__(name: str) -> Any:
    if name not in WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(WHERE[name])
    value = module if name in MODULES else getattr(module, ALIASES.get(name, name))
    globals()[name] = value
    return value
