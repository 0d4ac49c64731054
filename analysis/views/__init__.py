"""Pictures of a trace: the dashboard's step timeline, the per-block breakdown, Chrome traces."""
