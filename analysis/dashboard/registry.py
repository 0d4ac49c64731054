"""The panels, in page order. A new panel (memory, energy, roofline) is one function added here."""

from __future__ import annotations

from analysis.compare.agreement import AGREEMENT_TITLE
from analysis.dashboard.attention import attention_panel
from analysis.dashboard.blocks import blocks_panel
from analysis.dashboard.compare import compare_panel
from analysis.dashboard.compile import compile_panel
from analysis.dashboard.energy import energy_panel
from analysis.dashboard.findings import findings_panel
from analysis.dashboard.memory import memory_panel
from analysis.dashboard.optimize import optimize_panel
from analysis.dashboard.overhead import agreement_panel, overhead_panel
from analysis.dashboard.panel import PanelSpec
from analysis.dashboard.phases import distribution_panel, inference_bars_panel, phase_bars_panel
from analysis.dashboard.profile import kernels_panel, nvtx_gpu_panel, timeline_panel
from analysis.dashboard.ranks import rank_heatmap_panel, rank_straggler_panel, rank_timeline_panel
from analysis.dashboard.roofline import roofline_panel
from analysis.dashboard.serving import serving_panel
from analysis.dashboard.throughput import throughput_panel

PANELS: list[PanelSpec] = [
    PanelSpec("phases", "Forward / backward / optimizer time per model size", phase_bars_panel),
    PanelSpec("inference", "Prefill / decode time per model size", inference_bars_panel),
    PanelSpec("serving", "Serving: time to first token, per output token, output tokens/s", serving_panel),
    PanelSpec("blocks", "Per-block share of the step per model size", blocks_panel),
    PanelSpec("roofline", "Sub-blocks on the roofline (measured)", roofline_panel),
    PanelSpec("steps", "Per-step distributions and warm-up", distribution_panel),
    PanelSpec("overhead", "Profiler overhead: without vs with a profiler", overhead_panel),
    PanelSpec("agreement", AGREEMENT_TITLE, agreement_panel),
    PanelSpec("findings", "Findings by time at stake (newest run)", findings_panel),
    PanelSpec("kernels", "Top kernels by total GPU time", kernels_panel, scope="profile", escapes=True),
    PanelSpec("nvtx", "GPU time per NVTX range", nvtx_gpu_panel, scope="profile", escapes=True),
    PanelSpec("timeline", "Timeline of one step", timeline_panel, scope="profile", escapes=True),
    PanelSpec("throughput", "Throughput per configuration", throughput_panel),
    PanelSpec("compare", "Run comparison", compare_panel),
    PanelSpec("optimize", "Optimisation: each kept change's gain in tokens/s", optimize_panel),
    PanelSpec("attention", "Attention forward + backward time", attention_panel),
    PanelSpec("energy", "FLOPs per watt against batch size", energy_panel),
    PanelSpec("compile", "Eager vs torch.compile per phase", compile_panel, escapes=True),
    PanelSpec("memory", "Memory timeline (CUDA snapshot)", memory_panel),
    PanelSpec(
        "rank_straggler",
        "Straggler: compute and wait in collectives per rank",
        rank_straggler_panel,
        scope="ranks",
    ),
    PanelSpec("rank_phases", "Mean time per step: ranks × phases", rank_heatmap_panel, scope="ranks"),
    PanelSpec(
        "rank_timeline",
        "Ranks on one clock (session starts aligned)",
        rank_timeline_panel,
        scope="ranks",
    ),
]
