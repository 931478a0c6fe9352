"""`advise`: search the choices a user controls and rank them, answering the questions users ask.

The choices: strategy (sync all-reduce, sync PS, async PS), gradient grouping and bucket size
(MG-WFBP included), server count and placement (dedicated or colocated), which shard holds each
tensor (round-robin, and balanced by size where that lightens the busiest shard), the all-reduce scheme
on multi-device nodes (flat, hierarchical, tree, auto), and the worker count. Every candidate is
predicted with `sgdscale.predict.run_method` (coarse by default: milliseconds each), never with a
model of its own, so advice and `predict` cannot disagree.

**Efficiency** here is throughput / (N x one device's throughput without communication), the same
denominator for every strategy (a parameter server pays for its links even with one worker, so
`predict`'s per-strategy baseline would flatter it). For all-reduce it equals `predict`'s efficiency.
A parameter server can pass 100%: its shards run the optimizer step that the baseline includes (the
printout says so where it shows one; colocated shards are assumed to have CPU beside the worker).

**Why it stays interactive.** A candidate is not predicted where a cheap upper bound on its
throughput already rules it out: compute (N devices at profiled speed) and, for parameter servers,
the bytes every worker step must push through the server NICs (dedicated: S x server NIC / gradient
bytes; colocated: the node NICs carry the (n-1)/n share that leaves a node) and through the worker
NICs. Bounds only ever skip candidates that cannot reach the shown ranks or targets, so answers are
what predicting everything would give (`tests/test_advise.py` checks this). Searches along worker
counts assume that efficiency, once below a target, does not recover at larger counts, and that
throughput grows with workers between two grid points (the brute-force tests check both on the
built-in profiles).
"""

from sgdscale.advise.advisor import Advisor
from sgdscale.advise.answers import Advice, advise, explain
from sgdscale.advise.space import ADVICE_SCHEMA, STRATEGY_KINDS, Config, Point, candidates

__all__ = ["ADVICE_SCHEMA", "STRATEGY_KINDS", "Advice", "Advisor", "Config", "Point", "advise", "candidates", "explain"]
