"""What the commands run: sweeps, overhead, attention, profiling a program, diff, tables."""
