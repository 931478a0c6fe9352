"""Reports of a Prediction: a terminal table (table.py), plots (plot.py) and Chrome-trace
timelines (trace.py). Modules are imported where needed so `sgdscale --help` stays fast."""
