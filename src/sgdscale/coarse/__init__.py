"""Coarse-grained throughput models: each SGD step is a sequence of phases, solved in closed form or
with Mean Value Analysis, plus documented overlap heuristics.

- **sync all-reduce**: step = E[max over workers of pre-barrier compute] + sum over gradient groups
  of all-reduce(bytes_g, N) + optimizer. Groups come from `sgdscale.grouping.group_gradients` when
  that module is installed, otherwise one group per layer with parameters. E[max] is exact over the
  empirical distribution of the profile's samples (`phases.max_distribution`); per-worker speed
  factors enter as a product of scaled CDFs; slow links scale the collective's per-byte term.
- **sync parameter server**: step = E[max compute] + push + server update + pull, where push and
  pull last as long as the busiest NIC (a shard's N * bytes_on_shard, or a worker's own bytes), and
  each shard aggregates all N gradients then updates once.
- **async parameter server**: closed queueing network, N workers circulating between a delay
  station (compute, own NIC) and per-shard NIC-in / CPU / NIC-out queues, solved with exact MVA
  (Bard-Schweitzer above `mva.EXACT_MAX_CUSTOMERS` workers). Throughput = X(N) * batch.

With `heuristics=True` communication overlaps compute as `sgdscale.coarse.heuristics` documents
(all-reduce behind backward; PS push -> update -> pull as a pipeline starting during backward;
async: the same pipeline shortens the think time, MVA re-solved to a fixed point).
benchmarks/coarse_heuristics.py measures how far each variant is from the fine-grained simulator.

`Outcome.iteration_s`: for sync models, `iterations` steps drawn (seeded) from the exact
distribution of the slowest worker's compute plus the fixed communication; without variability the
deterministic step repeated. For async, one worker's compute draws plus the mean MVA queueing and
transfer time. `Outcome.throughput` always uses the exact expectation, not the draws.
"""

from __future__ import annotations

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.errors import UserError
from sgdscale.profile import Profile
from sgdscale.result import Outcome
from sgdscale.strategy import Strategy

__all__ = ["solve"]


def solve(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *, iterations: int = 100,
          seed: int = 0, variability: bool = True, heuristics: bool = True) -> Outcome:
    """Coarse-grained prediction for one cluster size (see the module docstring for the models)."""
    from sgdscale.coarse.models import solve_allreduce, solve_ps_async, solve_ps_sync

    if iterations < 1:
        raise UserError(f"iterations must be at least 1, got {iterations}")
    solver = {"allreduce": solve_allreduce, "ps-sync": solve_ps_sync, "ps-async": solve_ps_async}[strategy.kind]
    return solver(profile, cluster, strategy, comm, iterations=iterations, seed=seed,
                  variability=variability, heuristics=heuristics)
