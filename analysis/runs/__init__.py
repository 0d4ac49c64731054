"""What a run shows without reading an export: steady-state figures, energy, memory snapshots, the
roofline, and what the GPU self-test looks for."""
