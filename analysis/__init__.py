"""Tables and figures from Nsight Systems exports and the results store.

`analysis.export` opens an export (the only module that writes SQL against one); one module per table
(`kernels`, `nvtx`, `nvtx_gpu`, `cuda_api`, `memops`, `launch`, `osrt`, `timeline`, `summary`) turns what it
reads into pandas DataFrames shaped like the matching `nsys stats` report.
"""
