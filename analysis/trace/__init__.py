"""One profile opened as a trace: the trace model, its Parquet cache and kept results, Arrow arrays, and
many exports read as one (`multi`)."""
