"""The profilers `harness run --profiler` can put around a run, one module each, with one contract
(harness.profilers.base.Profiler) and one list of them (harness.profilers.registry):

wrap the measured steps, leave artifacts in the profile folder, and return what the run stores (the
profiler's name and its artifacts as {kind: path}).

- none: harness.profilers.none (the run in this process, or its ranks under torchrun)
- nsys: harness.profilers.nsys (the run in a child process under Nsight Systems; .nsys-rep and .sqlite)
- torch: harness.profilers.torch (torch.profiler in the worker process; a gzipped Chrome trace)
"""
