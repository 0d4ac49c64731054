"""Kernels joined to the CUDA runtime calls that launched them, and to the NVTX ranges open at launch."""
