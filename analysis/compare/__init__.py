"""Two of something side by side: profiles, exports, runs, eager against compiled, the profiler's overhead
and how far NVTX agrees with the harness's timers; iterations of a capture."""
