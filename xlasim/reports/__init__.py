"""Reports: what a rank did and where, as the user reads it.

A rank's end (`rank_outcome`), its captured output (`rank_output`), the user's frames of a
traceback (`frames`) and line of a call (`callsite`), where every rank is when ranks hang or
cannot meet (`hang_report`), and XLA's counters (`xla_counters`, `traced_counters`). Imports
only the base layer.
"""
