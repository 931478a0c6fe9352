"""Fine-grained prediction: one training run simulated task by task (compute per layer, every
gradient collective or message), from which iteration times, breakdown and bottleneck follow.

`simulate` picks the engine: synchronous all-reduce has a closed-form longest path per iteration
(one barrier per collective, one communication stream) that `sgdscale.fine.allreduce` evaluates
vectorized over workers; the parameter-server strategies, with shared NICs and fair bandwidth
sharing, go to the event-driven simulation `sgdscale.fine.ps` (networks `sgdscale.fine.links` and
`sgdscale.fine.hubs`, events `sgdscale.fine.events`); `sgdscale.fine.engine` runs explicit DAGs
for cross-checks.

Iterations: `warmup` steps are simulated first and discarded, then `iterations` steps are
reported (Outcome.iteration_s has `iterations` samples per worker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgdscale.errors import UserError

if TYPE_CHECKING:
    from sgdscale.cluster import Cluster
    from sgdscale.comm.cost import CommModel
    from sgdscale.profile import Profile
    from sgdscale.result import Outcome, TimelineSpec
    from sgdscale.strategy import Strategy


def check_step_counts(iterations: int, warmup: int) -> None:
    """Both engines need at least one reported step and no negative warm-up."""
    if iterations < 1:
        raise UserError(f"iterations must be at least 1, got {iterations}")
    if warmup < 0:
        raise UserError(f"warm-up iterations must not be negative, got {warmup}")


def simulate(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *, iterations: int = 100,
             warmup: int = 10, seed: int = 0, variability: bool = True,
             timeline: bool | TimelineSpec = False) -> Outcome:
    """Fine-grained prediction of one cluster size (see the module docstring)."""
    check_step_counts(iterations, warmup)
    if strategy.kind == "allreduce":
        from sgdscale.fine.allreduce import simulate_allreduce

        return simulate_allreduce(profile, cluster, strategy, comm, iterations=iterations, warmup=warmup,
                                  seed=seed, variability=variability, timeline=timeline)
    from sgdscale.fine.ps import simulate_ps

    return simulate_ps(profile, cluster, strategy, comm, iterations=iterations, warmup=warmup, seed=seed,
                       variability=variability, timeline=timeline)


__all__ = ["simulate"]
