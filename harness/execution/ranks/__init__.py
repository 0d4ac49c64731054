"""torchrun: N ranks of the worker as one run."""
