"""`predict`: one profile, one cluster and strategy, many worker counts, one or both methods.

Speedup and efficiency of each result are against the same method's one-worker outcome, on a
nominal worker (speed factor 1, the cluster's nominal link), so a heterogeneous cluster shows what
its slow parts cost. Each result records how long its predictor ran.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from sgdscale.cluster import Cluster
from sgdscale.comm import sharing
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import Topology
from sgdscale.errors import UserError
from sgdscale.profile import Profile
from sgdscale.result import Outcome, Prediction, Result, TimelineSpec
from sgdscale.strategy import Strategy

METHODS = ("fine", "coarse")

Progress = Callable[[int, int, str], None]  # (done, total, what is running next)


def run_method(method: str, profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel | Topology, *,
               iterations: int = 100, warmup: int = 10, seed: int = 0, variability: bool = True,
               timeline: bool | TimelineSpec = False) -> Outcome:
    """One method's outcome for one cluster size; `comm` is the NIC's cost model (nominal or
    measured), from which the topology of `cluster` answers every cost."""
    comm = Topology.of(cluster, comm, strategy)
    if method == "fine":
        from sgdscale.fine import simulate

        return simulate(profile, cluster, strategy, comm, iterations=iterations, warmup=warmup, seed=seed,
                        variability=variability, timeline=timeline)
    if method == "coarse":
        from sgdscale.coarse import solve

        return solve(profile, cluster, strategy, comm, iterations=iterations, seed=seed, variability=variability)
    raise UserError(f"unknown method '{method}'; choose fine, coarse or both")


def check_inputs(profile: Profile, cluster: Cluster, strategy: Strategy, worker_counts: Sequence[int],
                 methods: Sequence[str], iterations: int, warmup: int, seed: int = 0) -> None:
    """Every user mistake `predict` can meet, as one UserError each, before any work starts."""
    from sgdscale import inputs

    if not profile.layers:
        raise UserError("the profile has no layers; profile a model with `sgdscale profile MODEL -o FILE`")
    if not worker_counts:
        raise UserError("give at least one worker count (e.g. --workers 1-64:x2)")
    for count in worker_counts:
        if not isinstance(count, int) or count < 1:
            raise UserError(f"worker counts must be whole numbers >= 1, got {count}")
        inputs.check(count, "worker count", inputs.WORKERS, "predict at most 1,000,000 workers")
    if not methods:
        raise UserError("give at least one method: fine, coarse or both")
    for method in methods:
        if method not in METHODS:
            raise UserError(f"unknown method '{method}'; choose fine, coarse or both")
    if iterations < 1:
        raise UserError(f"iterations must be at least 1, got {iterations}")
    if warmup < 0:
        raise UserError(f"warm-up iterations must not be negative, got {warmup}")
    inputs.check_run_options(iterations=iterations, warmup=warmup, seed=seed)
    inputs.check_work(strategy.kind, methods, worker_counts, iterations + warmup, len(profile.tensors))
    if cluster.compute_scale or cluster.slow_links:
        if list(worker_counts) != [cluster.workers]:
            raise UserError(
                f"per-worker compute scales or slow links describe {cluster.workers} workers; "
                f"predict for exactly that count (--workers {cluster.workers}), not a range"
            )
    if strategy.uses_servers and strategy.ps_placement == "colocated":
        if cluster.ps_count != 1:
            raise UserError(f"colocated servers are one per node, so --ps {cluster.ps_count} does not apply; "
                            "drop --ps or use --ps-placement dedicated")
    elif strategy.uses_servers:
        tensors = len(profile.tensors)
        if cluster.ps_count > max(tensors, 1):
            raise UserError(
                f"a PS count larger than the tensors can use: {cluster.ps_count} server shards but the profile "
                f"has {tensors} gradient tensors, so shards would sit idle; use --ps {max(tensors, 1)} or fewer"
            )


def nominal_single_worker(cluster: Cluster) -> Cluster:
    """One worker at profiled speed on the nominal link: the baseline of speedup."""
    return dataclasses.replace(cluster, workers=1, compute_scale=(), slow_links=())


def describe_inputs(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel,
                    worker_counts: Sequence[int], methods: Sequence[str], *, iterations: int, warmup: int,
                    seed: int, variability: bool, profile_source: str | None = None) -> dict[str, Any]:
    """The inputs echoed into `sgdscale.prediction/1` so a result file explains itself."""
    return {
        "profile": {
            "source": profile_source or profile.model,
            "model": profile.model,
            "batch_size": profile.batch_size,
            "device": profile.device,
            "layers": len(profile.layers),
            "tensors": len(profile.tensors),
            "gradient_bytes": profile.gradient_bytes,
            "step_s": profile.compute_s,
            "calibration": list(profile.provenance.get("calibration", [])),
            "input": dict(profile.input),
        },
        "cluster": {
            "bandwidth_bps": cluster.bandwidth_bps,
            "latency_s": cluster.latency_s,
            "ps_count": cluster.ps_count,
            "ps_bandwidth_bps": cluster.server_bandwidth_bps,
            "compute_scale": list(cluster.compute_scale),
            "slow_links": [[w, bps] for w, bps in cluster.slow_links],
            "gpus_per_node": cluster.gpus_per_node,
            "intra_bandwidth_bps": cluster.intra_bandwidth_bps,
            "intra_latency_s": cluster.intra_latency_s,
            "framing": cluster.framing,
            "mtu_bytes": cluster.mtu_bytes,
        },
        "topology": {
            "nodes": {str(n): -(-n // cluster.gpus_per_node) for n in worker_counts},
            "gpus_per_node": cluster.gpus_per_node,
            "intra": {"bandwidth_bps": cluster.intra_bandwidth_bps, "latency_s": cluster.intra_latency_s},
            "nic": {"bandwidth_bps": cluster.bandwidth_bps, "latency_s": cluster.latency_s,
                    # payload rate / nominal rate: a measured network's, else the framing's
                    "payload_scale": Topology.of(cluster, comm).nic_factor},
            "allreduce": strategy.allreduce,
            "ps_placement": strategy.ps_placement,
        },
        "strategy": {
            "kind": strategy.kind,
            "grouping": strategy.grouping,
            "bucket_bytes": strategy.bucket_bytes,
            "first_bucket_bytes": strategy.first_bucket_bytes,
            "algorithm": strategy.algorithm,
            "placement": strategy.placement,
            "allreduce": strategy.allreduce,
            "ps_placement": strategy.ps_placement,
        },
        "comm": {
            "algorithm": comm.algorithm,
            "p2p_alpha_s": comm.p2p.alpha_s,
            "p2p_beta_s_per_byte": comm.p2p.beta_s_per_byte,
            "measured_allreduce_workers": sorted(comm.measured_allreduce),
            "server_cpu_s_per_byte": comm.server_cpu_s_per_byte,
            "server_cpu_s_per_message": comm.server_cpu_s_per_message,
            "worker_cpu_s_per_message": comm.worker_cpu_s_per_message,
            "share_weight_sigma": comm.share_weight_sigma,
            "newcomer_share_weight": comm.newcomer_share_weight,
            "late_joiner_weight": sharing.LATE_JOINER_WEIGHT,  # the fine method's PS links
            "interference": (None if getattr(comm, "interference", None) is None else
                             {"compute_slowdown": comm.interference.compute_slowdown,
                              "comm_slowdown": comm.interference.comm_slowdown}),
        },
        "worker_counts": list(worker_counts),
        "methods": list(methods),
        "iterations": iterations,
        "warmup": warmup,
        "seed": seed,
        "variability": variability,
    }


def predict(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, worker_counts: Sequence[int],
            methods: Sequence[str] = METHODS, *, iterations: int = 100, warmup: int = 10, seed: int = 0,
            variability: bool = True, timeline: bool = False, profile_source: str | None = None,
            progress: Progress | None = None) -> Prediction:
    """Predict every (worker count, method) pair; results ordered by workers, then method.

    `cluster` supplies the network, servers and (for one worker count) per-worker speeds;
    its `workers` is replaced by each count. `timeline=True` keeps a predicted timeline per result.
    """
    worker_counts = sorted(set(worker_counts))
    methods = list(dict.fromkeys(methods))
    check_inputs(profile, cluster, strategy, worker_counts, methods, iterations, warmup, seed)
    options = dict(iterations=iterations, warmup=warmup, seed=seed, variability=variability)
    total = len(methods) * (len(worker_counts) + (0 if 1 in worker_counts and cluster.homogeneous else 1))
    done = 0

    def step(label: str) -> None:
        if progress is not None:
            progress(done, total, label)

    results: list[Result] = []
    for method in methods:
        baseline: Outcome | None = None
        if not (1 in worker_counts and cluster.homogeneous):
            step(f"{method}, 1 worker (baseline)")
            baseline = run_method(method, profile, nominal_single_worker(cluster), strategy, comm, **options)
            done += 1
        for count in worker_counts:
            step(f"{method}, {count} worker{'s' if count > 1 else ''}")
            began = time.perf_counter()
            outcome = run_method(method, profile, cluster.with_workers(count), strategy, comm, timeline=timeline,
                                 **options)
            elapsed = time.perf_counter() - began
            done += 1
            if count == 1 and baseline is None:
                baseline = outcome
            assert baseline is not None
            results.append(Result.from_outcome(count, method, outcome, baseline.throughput, predict_time_s=elapsed))
    step("done")
    results.sort(key=lambda r: (r.workers, METHODS.index(r.method)))
    inputs = describe_inputs(profile, cluster, strategy, comm, worker_counts, methods, profile_source=profile_source,
                             **options)
    return Prediction(inputs=inputs, results=results)


class _CallableModule(type(dataclasses)):
    """Python binds the package attribute `sgdscale.predict` to this module once it is loaded, so
    the module itself answers `sgdscale.predict("resnet50", workers=[1, 8])`: the one-call API."""

    def __call__(self, profile: str, **options: Any) -> dict[str, Any]:
        from sgdscale.api import predict as one_call

        return one_call(profile, **options)


sys.modules[__name__].__class__ = _CallableModule
