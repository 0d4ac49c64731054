"""harness: run LLM workloads under Nsight Systems and turn what it records into numbers you can trust."""

__version__ = "0.1.0"
