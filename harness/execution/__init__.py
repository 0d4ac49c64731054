"""The step loop, the worker process and its parent half, supervision, nsys, ranks."""
