"""The panels, in page order. A new panel (memory, energy, roofline) is one function added here."""

from __future__ import annotations

from analysis.dashboard import (
    attention,
    blocks,
    compare,
    energy,
    findings,
    memory,
    overhead,
    phases,
    profile,
    ranks,
    roofline,
    throughput,
)
from analysis.dashboard import compile as compile_panels
from analysis.dashboard.panel import PanelSpec

PANELS: list[PanelSpec] = [
    PanelSpec("phases", "Forward / backward / optimizer time per model size", phases.phase_bars_panel),
    PanelSpec("inference", "Prefill / decode time per model size", phases.inference_bars_panel),
    PanelSpec("blocks", "Per-block share of the step per model size", blocks.blocks_panel),
    PanelSpec("roofline", "Sub-blocks on the roofline (measured)", roofline.roofline_panel),
    PanelSpec("steps", "Per-step distributions and warm-up", phases.distribution_panel),
    PanelSpec("overhead", "Profiler overhead: without vs with a profiler", overhead.overhead_panel),
    PanelSpec("agreement", "NVTX ranges vs in-process timers", overhead.agreement_panel),
    PanelSpec("findings", "Findings by time at stake (newest run)", findings.findings_panel),
    PanelSpec("kernels", "Top kernels by total GPU time", profile.kernels_panel, scope="profile"),
    PanelSpec("nvtx", "GPU time per NVTX range", profile.nvtx_gpu_panel, scope="profile"),
    PanelSpec("timeline", "Timeline of one step", profile.timeline_panel, scope="profile"),
    PanelSpec("throughput", "Throughput per configuration", throughput.throughput_panel),
    PanelSpec("compare", "Run comparison", compare.compare_panel),
    PanelSpec("attention", "Attention forward + backward time", attention.attention_panel),
    PanelSpec("energy", "FLOPs per watt against batch size", energy.energy_panel),
    PanelSpec("compile", "Eager vs torch.compile per phase", compile_panels.compile_panel),
    PanelSpec("memory", "Memory timeline (CUDA snapshot)", memory.memory_panel),
    PanelSpec(
        "rank_straggler",
        "Straggler: compute and wait in collectives per rank",
        ranks.rank_straggler_panel,
        scope="ranks",
    ),
    PanelSpec("rank_phases", "Mean time per step: ranks × phases", ranks.rank_heatmap_panel, scope="ranks"),
    PanelSpec(
        "rank_timeline",
        "Ranks on one clock (session starts aligned)",
        ranks.rank_timeline_panel,
        scope="ranks",
    ),
]
