"""How unequally concurrent TCP flows share one link, as the prediction methods model it.

Flows converging on one shaped link do not finish together (`benchmarks/incast_fairness.py`: the
first of 4 equal senders done at 0.87 of the last one's time). The fine method shares links
weighted max-min, each flow (one connection's messages of one step) weighted exp(sigma * z), z
standard normal (`sgdscale.fine.links`). Under that sharing, k equal flows started together finish
in the order of their weights, the heaviest first at sum(phi) / (k * max(phi)) of the last one's
time (the last finishes when all bytes are through, as under equal sharing). `first_over_last` is
that fraction, which netbench's sharing fit inverts.

Nothing measured (nominal figures, or a network file from netbench with 2 processes, whose incast has
one sender): links are shared equally, and identical parameter-server workers can settle into lock
step in the fine method. `EQUAL_SHARING_NOTE` says so wherever that happens.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

# Incumbents first (`sgdscale.fine.links.LinkNetwork`, `newcomer_weight`): a flow that starts out of a
# node whose link has been busy since before it starts gets this weight relative to the flows
# already leaving that node (flows that start at the same instant share as above; flows from
# several nodes into one share the receiver's link equally). Used where a network file measured
# link sharing (`CommModel.from_network`, sigma > 0). Measured on the emulated cluster with two
# TCP flows of 35 MB, the second 2-80 ms after the first (`benchmarks/head_start.py`; Reno, tbf
# queue of 50 ms of line rate): out of one node the newcomer got a weight of 0.22-0.24 while both
# moved, whatever the head start; into one node, 0.99-1.00. So a shard's pulls take turns and its
# pushes share. (Found first on set 19's async replays, `benchmarks/async_stagger.py`, where the
# workers took turns; sets 20-22 ran with 0.1 on both links of a flow.) `sgdscale netbench --ops
# outcast` measures it with gloo on any cluster (`Outcast` in the network file), but it is recorded,
# not used: with 16 MB flows it ranged 0.40-0.94 on the clusters of sets 22-25 and moved 0.05-0.43
# between two runs on one cluster, and re-predicting those sets with it helped none of them
# (`benchmarks/outcast_weight.py`, `benchmarks/results/newcomer_weight_outcast_heldout*.md`).
NEWCOMER_SHARE_WEIGHT = 0.22

DRAWS = 20_000  # Monte Carlo draws: the fraction to about 1e-3, deterministic (fixed seed)

# Measured on held-out sets 8 and 9 (README): what equal sharing did to 2-worker PS, and the fix.
EQUAL_SHARING_NOTE = (
    "links are shared equally (nothing measured how flows share them), and identical parameter-server workers "
    "can then run in lock step in the fine method: with 2 workers it predicted sync PS 15-21% and async PS 31-44% "
    "too slow on held-out sets 8 and 9, where a network file with the sharing measured came within 6.3%; measure it "
    "with `sgdscale netbench` with 3 processes or more (incast needs 2 senders) and pass --network"
)


@lru_cache(maxsize=256)
def first_over_last(senders: int, sigma: float, statistic: str = "mean") -> float:
    """Mean (or median) over log-normal(0, sigma) weights of sum(phi) / (senders * max(phi)): when
    the first of `senders` equal flows started together finishes, as a fraction of the last's time.
    1 for one sender or sigma = 0."""
    if senders <= 1 or sigma <= 0.0:
        return 1.0
    z = np.random.default_rng(0).standard_normal((DRAWS, senders))
    phi = np.exp(sigma * z)
    ratio = phi.sum(axis=1) / (senders * phi.max(axis=1))
    return float(np.median(ratio) if statistic == "median" else ratio.mean())
