"""The tables `nsys stats` prints, computed from a trace (kernels, nvtx, nvtx_gpu, cuda_api, memops,
launch, osrt, operators, summary), the registry that declares them (`tables`) and their formats."""
