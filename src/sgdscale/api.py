"""One call from Python: `sgdscale.predict("resnet50", workers=[1, 8, 64], bandwidth="10Gbit")`.

Returns the `sgdscale.prediction/1` document that `sgdscale predict ... --json FILE` writes, with the
same keys and, for the same inputs and seed, the same numbers (only `predict_time_s`, how long
the predictor ran, differs). The options are the CLI's, in Python spelling; the cluster is resolved by
the CLI's own `resolve_cluster`, so both read every option the same way. No torch is imported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sgdscale.errors import UserError


def _number(value: Any, unit: str) -> str | None:
    """An option value as the CLI reads it: text stays text, a plain number gets its SI unit
    (bit/s for rates, seconds for times), None stays None (the CLI's default)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"expected a number or text such as '10Gbit' or '20us', got {value!r}")
    return f"{float(value)!r}{unit}"


def _counts(value: int | Sequence[int] | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ",".join(str(int(v)) for v in value)


def predict(profile: str, *, workers: int | Sequence[int] | str | None = None, bandwidth: str | float | None = None,
            latency: str | float | None = None, strategy: str = "allreduce", ps: int = 1,
            ps_bandwidth: str | float | None = None, placement: str = "round-robin", grouping: str | None = None,
            bucket_mb: float = 25.0, algorithm: str = "ring", allreduce: str = "flat",
            ps_placement: str = "dedicated", method: str = "both", iterations: int = 100, warmup: int = 10,
            seed: int = 0, variability: bool = True, network: str | None = None, nodes: int | Sequence[int] | str | None = None,
            gpus_per_node: int | None = None, intra_bandwidth: str | float | None = None,
            intra_latency: str | float | None = None, cluster: str | None = None,
            compute_scale: Sequence[float] | str | None = None, slow_links: Sequence[str] = (),
            cpu_per_node: float | None = None, interference: bool = True, framing: str | None = None,
            mtu: int | None = None, collectives_at_once: int | None = None) -> dict[str, Any]:
    """Predict throughput, speedup and bottleneck for `profile` (a profile file or a built-in name).

    Options mean what `sgdscale predict --help` says (`ps` is `--ps`, `cluster` is `--cluster`,
    `variability=False` is `--no-variability`); bandwidths and times take text ("10Gbit", "20us")
    or plain numbers (bit/s, seconds). Bad input raises `sgdscale.errors.UserError` with the CLI's
    message (options named as on the command line).
    """
    from sgdscale.commands.predict import resolve_cluster
    from sgdscale.inputs import check_predict_options
    from sgdscale.predict import predict as run
    from sgdscale.profile import load_profile
    from sgdscale.strategy import MIB, Strategy

    methods = {"fine": ["fine"], "coarse": ["coarse"], "both": ["fine", "coarse"]}.get(method)
    if methods is None:
        raise UserError(f"unknown method '{method}'; choose fine, coarse or both")
    # the CLI's checks, in its words (an option is named as on the command line)
    check_predict_options(bucket_mb=bucket_mb, ps_count=ps, strategy=strategy, iterations=iterations, warmup=warmup,
                          seed=seed)
    if compute_scale is not None and not isinstance(compute_scale, str):
        compute_scale = ",".join(repr(float(s)) for s in compute_scale)
    plan = Strategy(kind=strategy, grouping=grouping, bucket_bytes=bucket_mb * MIB, algorithm=algorithm,
                    placement=placement, allreduce=allreduce, ps_placement=ps_placement,
                    collectives_at_once=collectives_at_once)
    counts, resolved, comm, _notes = resolve_cluster(
        workers=_counts(workers), nodes=_counts(nodes), gpus_per_node=gpus_per_node,
        intra_bandwidth=_number(intra_bandwidth, "bit"), intra_latency=_number(intra_latency, "s"),
        cluster_file=cluster, bandwidth=_number(bandwidth, "bit"), latency=_number(latency, "s"), ps_count=ps,
        ps_bandwidth=_number(ps_bandwidth, "bit"),
        algorithm=algorithm, network_file=network, compute_scale=compute_scale, slow_links=tuple(slow_links),
        cpu_per_node=cpu_per_node, interference=interference, framing=framing, mtu=mtu)
    prediction = run(load_profile(profile), resolved, plan, comm, counts, methods, iterations=iterations,
                     warmup=warmup, seed=seed, variability=variability, profile_source=profile)
    from sgdscale.heldout_ranges import attach, network_source

    attach(prediction, network_source(network, cpu_per_node))
    # The JSON round trip gives exactly what --json writes (plain lists, floats, no dataclasses).
    return json.loads(json.dumps(prediction.to_json()))
