"""Tables and figures from Nsight Systems exports, Kineto traces and the results store.

Rooms by what they are for, each importing only those below it (docs/dev/architecture.md; checked by
tests/test_layers.py): readers/ (one per format) → trace/ (the trace model, its cache) → joins/ → hta/ →
tables/ (one `nsys stats` table each) → runs/ → views/ → ranks/ → compare/ → advice/ → dashboard/; the
modules directly here are shared by all.
"""
