"""`sgdscale advise`: rank the choices a user controls and answer sizing questions (sgdscale.advise).

The cluster options are `predict`'s own click options (shared objects, parsed by
`commands.predict.resolve_cluster`), so the two commands read a cluster identically.
"""

from __future__ import annotations

import copy
import re

import click

from sgdscale.commands.predict import predict_command, resolve_cluster
from sgdscale import inputs
from sgdscale.errors import UserError
from sgdscale.jsonio import all_or_nothing

DEFAULT_ADVISE_WORKERS = "1-1024:x2"
# predict's options that describe the cluster and the simulation; the rest are what advise searches.
SHARED_OPTIONS = ("workers", "nodes", "gpus_per_node", "intra_bandwidth", "intra_latency", "cluster_file",
                  "bandwidth", "latency", "framing", "mtu", "ps_bandwidth", "algorithm", "network_file", "iterations", "warmup",
                  "seed", "no_variability", "cpu_per_node", "no_interference")


def shared_options(default_workers: str) -> list[click.Parameter]:
    """predict's cluster options, with --workers' help naming this command's default."""
    params = []
    for param in predict_command.params:
        if param.name in SHARED_OPTIONS:
            if param.name == "workers":
                param = copy.copy(param)
                param.help = (f"Worker counts to search: 8, 1,2,4 or a range 1-64 / 1-1024:x2 (doubling). "
                              f"[default: {default_workers}]")
            params.append(param)
    return params


@click.command("advise")
@click.argument("profile")
@click.option("--target-efficiency", type=float, default=None,
              help="Most workers whose efficiency stays at or above this, e.g. 0.8.")
@click.option("--target-throughput", default=None,
              help="Bandwidth (and, with --price-per-node-hour, the cheapest cluster) for this many samples/s, "
                   "e.g. 2000/s.")
@click.option("--price-per-node-hour", type=float, default=None,
              help="Price of one node for one hour (servers count as nodes), e.g. 3.2: the cheapest configuration.")
@click.option("--best-bucket", is_flag=True, help="The best DDP bucket size at each worker count (vs MG-WFBP).")
@click.option("--strategies", default="allreduce,ps-sync,ps-async", show_default=True,
              help="Strategies to search.")
@click.option("--groupings", default=None,
              help="Groupings to search (default: all: buckets, mg-wfbp, per-layer, per-tensor, single; "
                   "PS: per-tensor, buckets).")
@click.option("--bucket-sizes", default=None, metavar="MIB,...",
              help="Bucket caps in MiB to search. [default: 25; with --best-bucket 0.5,1,2,5,10,25,50,100,200]")
@click.option("--ps-counts", default="1,2,4,8", show_default=True, help="Dedicated server shard counts to search.")
@click.option("--method", default="coarse", show_default=True,
              help="coarse (queueing model, milliseconds per candidate) or fine (simulation).")
@click.option("--confirm", default=None, help="fine: re-predict the top few at each worker count with the fine method.")
@click.option("--confirm-top", type=int, default=3, show_default=True, help="How many --confirm re-predicts.")
@click.option("--top", type=int, default=3, show_default=True, help="Configurations shown per worker count.")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Write the advice (sgdscale.advice/1).")
@all_or_nothing()
def advise_command(profile: str, target_efficiency: float | None, target_throughput: str | None,
                   price_per_node_hour: float | None, best_bucket: bool, strategies: str, groupings: str | None,
                   bucket_sizes: str | None, ps_counts: str, method: str, confirm: str | None, confirm_top: int,
                   top: int, json_path: str | None, **cluster_options) -> None:
    """Search strategy, grouping, bucket size, servers, all-reduce scheme and worker count for
    PROFILE (a file or built-in name), rank them, and answer: how many workers stay efficient
    (--target-efficiency), what bandwidth a throughput needs (--target-throughput), the cheapest
    cluster (--price-per-node-hour), the best bucket size (--best-bucket).

    \b
    Examples:
      sgdscale advise resnet50 --bandwidth 10Gbit --target-efficiency 0.8
      sgdscale advise resnet50 --target-throughput 2000/s --price-per-node-hour 3.2
      sgdscale advise gpt2 --workers 16 --best-bucket --confirm fine --json advice.json
      sgdscale advise resnet50 --cluster dgx-a100 --nodes 1-16:x2
    """
    from rich.console import Console

    from sgdscale.advise import STRATEGY_KINDS, advise
    from sgdscale.profile import load_profile

    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    kinds = parse_list(strategies, "--strategies", str, "allreduce,ps-sync")
    for kind in kinds:
        if kind not in STRATEGY_KINDS:
            raise UserError(f"unknown strategy '{kind}' in --strategies; choose from {', '.join(STRATEGY_KINDS)}")
    counts_ps = parse_list(ps_counts, "--ps-counts", int, "1,2,4")
    if any(c < 1 for c in counts_ps):
        raise UserError(f"--ps-counts must be whole numbers >= 1, got '{ps_counts}'")
    sizes = parse_list(bucket_sizes, "--bucket-sizes", float, "5,25,100")
    if sizes is not None and any(not s > 0 for s in sizes):
        raise UserError(f"--bucket-sizes must be positive MiB, got '{bucket_sizes}'")
    chosen_groupings = parse_list(groupings, "--groupings", str, "buckets,mg-wfbp")
    throughput = parse_throughput(target_throughput) if target_throughput is not None else None
    if method not in ("coarse", "fine"):
        raise UserError(f"unknown --method '{method}'; choose coarse or fine")
    iterations, warmup = cluster_options.pop("iterations"), cluster_options.pop("warmup")
    seed, no_variability = cluster_options.pop("seed"), cluster_options.pop("no_variability")
    inputs.check_run_options(iterations=iterations, warmup=warmup, seed=seed)
    inputs.check_outputs({"--json": json_path})
    if cluster_options["workers"] is None and cluster_options["nodes"] is None:
        from sgdscale.clusters import load_cluster

        spec = load_cluster(cluster_options["cluster_file"]) if cluster_options["cluster_file"] else None
        if spec is None or spec.nodes is None:
            cluster_options["workers"] = DEFAULT_ADVISE_WORKERS
    no_interference = cluster_options.pop("no_interference")
    if throughput is not None and cluster_options.get("cpu_per_node") is not None:
        raise UserError("--target-throughput searches the NIC bandwidth, which --cpu-per-node caps; drop one of them")
    counts, cluster, comm, notes = resolve_cluster(ps_count=1, interference=not no_interference, **cluster_options)
    loaded = load_profile(profile)
    from sgdscale.clusters import device_note

    mismatch = device_note(cluster_options["cluster_file"], loaded, can_calibrate=False)
    if mismatch:
        notes.insert(0, mismatch)
    if method == "fine":  # each kind's cheapest configuration alone must fit the fine method's bound
        for kind in kinds:
            inputs.check_work(kind, ["fine"], counts, iterations + warmup, len(loaded.tensors))
    from sgdscale.heldout_ranges import network_source

    with console.status("searching", spinner="dots") if console.is_terminal else _nothing():
        advice = advise(loaded, cluster, comm, counts, method=method, confirm=confirm, confirm_top=confirm_top,
                        top=top, target_efficiency=target_efficiency, target_throughput=throughput,
                        price_per_node_hour=price_per_node_hour, best_bucket=best_bucket, kinds=kinds,
                        ps_counts=counts_ps, bucket_sizes_mib=sizes, groupings=chosen_groupings,
                        iterations=iterations, warmup=warmup, seed=seed, variability=not no_variability,
                        measured_network=bool(cluster_options.get("network_file")),
                        range_source=network_source(cluster_options.get("network_file"),
                                                    cluster_options.get("cpu_per_node")))
    from sgdscale.report.advice import print_advice

    print_advice(console, advice)
    for note in notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if json_path:
        from sgdscale.jsonio import write_json_atomic

        write_json_atomic(json_path, advice.to_json())
        console.print(f"advice written to {json_path}")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


advise_command.params[1:1] = shared_options(DEFAULT_ADVISE_WORKERS)


def register(app: click.Group) -> None:
    app.add_command(advise_command)


def parse_throughput(text: str) -> float:
    """'2000/s', '2000', '2k/s', '2000 samples/s' -> samples/s."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmM]?)\s*(?:samples)?\s*(?:/\s*s)?\s*",
                         str(text))
    if not match:
        raise UserError(f"cannot read --target-throughput '{text}'; give samples per second, e.g. 2000/s or 2k/s")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6}[match.group(2)]
    return inputs.check(value, "--target-throughput", inputs.SAMPLES_PER_S, "e.g. 2000/s", shown=text)


def parse_list(text: str | None, what: str, cast=float, example: str = "") -> list | None:
    if text is None:
        return None
    try:
        values = [cast(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise UserError(f"cannot read {what} '{text}' (e.g. {example})") from None
    if not values:
        raise UserError(f"{what} is empty (e.g. {example})")
    return values
