"""`sweep`: predictions over a grid, on a process pool or a Dask cluster, streamed to a columnar file.

A grid is the product of workers x nodes' devices x bandwidth x latency x strategy x grouping x
bucket size x server count (x server placement, tensor placement, all-reduce scheme, method).
Dimensions that do not apply collapse (bucket size only for `buckets`, server count and placements
only for parameter servers, tensor placement only with several shards, the scheme only for all-reduce
on multi-device nodes), so no prediction is made twice.

**Tasks.** One task is one `sgdscale.predict.predict` call: every worker count of one
configuration, sharing the one-worker baseline, exactly as `sgdscale predict` would run it, so a
row equals the direct prediction. Every cluster is built by `commands.predict.resolve_cluster`
from the same strings the CLI takes.

**Streaming and resuming.** A task's rows are written together, as soon as it finishes: a CSV gets
them appended and fsynced; a Parquet output (`X.parquet`) gets them as atomically renamed part files
in `X.parquet.parts/`, merged into `X.parquet` when the sweep completes. Each row carries its task's
key (a hash of the task's inputs), so a rerun of an interrupted sweep reads what is there, drops a
torn last CSV line, and computes only the tasks that are missing.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sgdscale import inputs
from sgdscale.errors import UserError

SPEC_KEYS = {
    # key: (default, kind) ; kind "list" values may be given as a list or a comma-separated string
    "profile": (None, "scalar"),
    "workers": ("1-64:x2", "scalar"),
    "nodes": (None, "scalar"),
    "gpus_per_node": ([1], "list"),
    "bandwidth": (["10Gbit"], "list"),
    "latency": (["20us"], "list"),
    "intra_bandwidth": (None, "scalar"),
    "intra_latency": (None, "scalar"),
    "strategy": (["allreduce"], "list"),
    "grouping": ([None], "list"),
    "bucket_mb": ([25.0], "list"),
    "ps": ([1], "list"),
    "ps_placement": (["dedicated"], "list"),
    "placement": (["round-robin"], "list"),
    "allreduce": (["flat"], "list"),
    "algorithm": ("ring", "scalar"),
    "framing": ("ethernet", "scalar"),
    "mtu": (1500, "scalar"),
    "method": (["coarse"], "list"),
    "iterations": (100, "scalar"),
    "warmup": (10, "scalar"),
    "seed": (0, "scalar"),
    "variability": (True, "scalar"),
}
TASK_KEYS = ("profile", "workers", "gpus_per_node", "bandwidth", "latency", "intra_bandwidth", "intra_latency",
             "strategy", "grouping", "bucket_mb", "ps", "ps_placement", "placement", "allreduce", "algorithm",
             "framing", "mtu", "method", "iterations", "warmup", "seed", "variability")
COLUMNS = (
    ("task", "str"), ("model", "str"), ("method", "str"), ("strategy", "str"), ("grouping", "str"),
    ("bucket_mb", "float"), ("ps_count", "int"), ("ps_placement", "str"), ("placement", "str"),
    ("allreduce", "str"),
    ("gpus_per_node", "int"), ("nodes", "int"), ("workers", "int"), ("bandwidth_bps", "float"),
    ("latency_s", "float"), ("framing", "str"), ("throughput", "float"), ("likely_low", "float"),
    ("likely_high", "float"), ("likely_note", "str"), ("speedup", "float"), ("efficiency", "float"),
    ("step_mean_s", "float"), ("step_p95_s", "float"), ("compute_s", "float"), ("exposed_comm_s", "float"),
    ("wait_s", "float"), ("limited_by", "str"), ("bottleneck", "str"), ("predict_time_s", "float"),
)


# ---------------------------------------------------------------------- the grid


def load_spec(path: str) -> dict[str, Any]:
    """A grid from a small YAML or JSON file: the keys of `SPEC_KEYS`, each a value or a list."""
    from sgdscale.jsonio import parse_json_text, read_json_file

    file = Path(path)
    missing = f"--spec {path}: no such file"
    if file.suffix not in (".yaml", ".yml"):
        data = read_json_file(file, what="grid spec", missing=missing)
        text = None
    else:
        if file.is_dir():
            raise UserError(f"--spec {path} is a directory, not a grid spec; give the file itself")
        try:
            text = file.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise UserError(missing) from None
        except UnicodeDecodeError as error:
            raise UserError(f"{path}: not UTF-8 text (offset {error.start}); is it a grid spec?") from None
        except OSError as error:
            raise UserError(f"cannot read --spec {path}: {error.strerror or error}") from None
    try:
        if text is not None:
            try:
                import yaml
            except ImportError:
                raise UserError("YAML specs need PyYAML (pip install 'sgdscale[sweep]'); or write the spec as JSON") \
                    from None
            data = yaml.safe_load(text)
            parse_json_text(json.dumps(data, default=str), str(path), "grid spec")  # the same depth bound
    except UserError:
        raise
    except Exception as error:  # yaml.YAMLError; yaml imported lazily
        raise UserError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a grid spec is a mapping of option to values, e.g. bandwidth: [1Gbit, 10Gbit]")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise UserError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                        f"known: {', '.join(SPEC_KEYS)}")
    return data


def normalize(spec: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, list dimensions as lists (comma-separated strings split)."""
    out = {}
    for key, (default, kind) in SPEC_KEYS.items():
        value = spec.get(key, default)
        if value is None:
            value = default
        if kind == "list":
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            elif not isinstance(value, list):
                value = [value]
            if not value:
                raise UserError(f"grid dimension '{key}' is empty; give at least one value")
        elif key == "workers" and isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        for item in value if kind == "list" else [value]:
            if isinstance(item, (dict, list)):
                raise UserError(f"grid key '{key}': {inputs.show(item)} is not a single value (a text or a number); "
                                "write e.g. bandwidth: [1Gbit, 10Gbit]")
        out[key] = value
    if out["profile"] is None:
        raise UserError("the sweep needs a profile (a file or built-in name such as resnet50)")
    if not isinstance(out["profile"], str):
        raise UserError(f"grid key 'profile': {inputs.show(out['profile'])} is not a file or built-in name "
                        "(e.g. profile: resnet50)")
    return out


def expand(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every task of the grid, with dimensions that do not apply collapsed (module docstring)."""
    from sgdscale.placement import PLACEMENTS
    from sgdscale.strategy import ALLREDUCE_SCHEMES, GROUPINGS, KINDS, PS_PLACEMENTS

    s = normalize(spec)
    for key, allowed in (("strategy", KINDS), ("ps_placement", PS_PLACEMENTS), ("placement", PLACEMENTS),
                         ("allreduce", ALLREDUCE_SCHEMES), ("method", ("fine", "coarse"))):
        for value in s[key]:
            if value not in allowed:
                raise UserError(f"unknown {key.replace('_', '-')} '{value}' in the grid; choose from {', '.join(allowed)}")
    for value in s["grouping"]:
        if value is not None and value not in GROUPINGS:
            raise UserError(f"unknown grouping '{value}' in the grid; choose from {', '.join(GROUPINGS)}")
    try:
        s["bucket_mb"] = [float(v) for v in s["bucket_mb"]]
        s["ps"] = [_whole(v) for v in s["ps"]]
        s["gpus_per_node"] = [_whole(v) for v in s["gpus_per_node"]]
        for key in ("iterations", "warmup", "seed", "mtu"):
            s[key] = _whole(s[key])
    except (TypeError, ValueError, OverflowError):
        raise UserError("bucket_mb must be numbers (MiB); ps, gpus_per_node, iterations, warmup, seed and mtu "
                        "whole numbers") from None
    for value in s["bucket_mb"]:
        inputs.check(value, "--bucket-mb", inputs.BUCKET_MIB, "e.g. --bucket-mb 5,25")
    for value in s["ps"]:
        inputs.check(value, "--ps", inputs.SERVERS, "e.g. --ps 1,4")
    for value in s["gpus_per_node"]:
        inputs.check(value, "--gpus-per-node", inputs.GPUS_PER_NODE, "e.g. --gpus-per-node 1,8")
    seen: dict[str, dict[str, Any]] = {}
    for gpus, bw, lat, kind, grouping, bucket, ps, placement, tensors_on, scheme, method in itertools.product(
            s["gpus_per_node"], s["bandwidth"], s["latency"], s["strategy"], s["grouping"], s["bucket_mb"], s["ps"],
            s["ps_placement"], s["placement"], s["allreduce"], s["method"]):
        default_grouping = "per-tensor" if kind.startswith("ps") else "buckets"
        grouping = grouping or default_grouping
        servers = kind.startswith("ps")
        task = {
            "profile": s["profile"], "gpus_per_node": gpus, "latency": str(lat),
            # a number in a spec file is bit/s, as in cluster files; text needs its unit
            "bandwidth": f"{bw!r}bit" if isinstance(bw, (int, float)) and not isinstance(bw, bool) else str(bw),
            "intra_bandwidth": s["intra_bandwidth"], "intra_latency": s["intra_latency"],
            "strategy": kind, "grouping": grouping, "bucket_mb": bucket if grouping == "buckets" else None,
            "ps": (ps if placement == "dedicated" else 1) if servers else None,
            "ps_placement": placement if servers else None,
            # which shard holds each tensor matters only with several (colocated: one per node)
            "placement": tensors_on if servers and (ps > 1 or placement == "colocated") else None,
            "allreduce": scheme if (kind == "allreduce" and gpus > 1) else "flat",
            "algorithm": s["algorithm"], "framing": str(s["framing"]), "mtu": s["mtu"], "method": method,
            "iterations": int(s["iterations"]),
            "warmup": int(s["warmup"]), "seed": int(s["seed"]), "variability": bool(s["variability"]),
            "workers": _workers_text(s, gpus),
        }
        task["key"] = task_key(task)
        seen.setdefault(task["key"], task)
    return list(seen.values())


def _whole(value: Any) -> int:
    """A whole number from a spec (int, integral float or digits); ValueError otherwise."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


def _workers_text(s: dict[str, Any], gpus: int) -> str:
    """Worker counts (devices) of a task: --nodes x devices per node, else --workers."""
    if s["nodes"] is not None:
        from sgdscale.units import parse_workers

        return ",".join(str(n * gpus) for n in parse_workers(str(s["nodes"])))
    return str(s["workers"])


def task_key(task: dict[str, Any]) -> str:
    body = json.dumps({k: task[k] for k in TASK_KEYS}, sort_keys=True, default=str)
    return hashlib.sha1(body.encode()).hexdigest()[:16]


def check_tasks(tasks: Sequence[dict[str, Any]]) -> None:
    """Build every task's inputs once (no prediction), so bad input fails before any file is written."""
    for task in tasks:
        _inputs(task)


# ---------------------------------------------------------------------- one task


@lru_cache(maxsize=8)
def _profile(name: str):
    from sgdscale.profile import load_profile

    return load_profile(name)


def _inputs(task: dict[str, Any]):
    from sgdscale.commands.predict import resolve_cluster
    from sgdscale.strategy import MIB, Strategy

    counts, cluster, comm, _notes = resolve_cluster(
        workers=task["workers"], nodes=None, gpus_per_node=task["gpus_per_node"],
        intra_bandwidth=task["intra_bandwidth"], intra_latency=task["intra_latency"], cluster_file=None,
        bandwidth=task["bandwidth"], latency=task["latency"], ps_count=task["ps"] or 1, ps_bandwidth=None,
        algorithm=task["algorithm"], network_file=None, framing=task["framing"], mtu=task["mtu"])
    strategy = Strategy(kind=task["strategy"], grouping=task["grouping"],
                        bucket_bytes=(task["bucket_mb"] or 25.0) * MIB, algorithm=task["algorithm"],
                        allreduce=task["allreduce"], ps_placement=task["ps_placement"] or "dedicated",
                        placement=task["placement"] or "round-robin")
    profile = _profile(task["profile"])
    from sgdscale.predict import check_inputs

    check_inputs(profile, cluster, strategy, counts, [task["method"]], task["iterations"], task["warmup"],
                 task["seed"])
    return profile, counts, cluster, comm, strategy


def run_task(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one task: `predict` for all its worker counts (what `sgdscale predict` runs), each
    with the 80% range `predict` states for a prediction from nominal figures (or why none)."""
    from sgdscale.heldout_ranges import attach
    from sgdscale.predict import predict

    profile, counts, cluster, comm, strategy = _inputs(task)
    prediction = predict(profile, cluster, strategy, comm, counts, [task["method"]], iterations=task["iterations"],
                         warmup=task["warmup"], seed=task["seed"], variability=task["variability"])
    attach(prediction, "nominal")
    rows = []
    for r in prediction.results:
        likely = r.likely_range or {}
        rows.append({
            "task": task["key"], "model": profile.model, "method": r.method, "strategy": strategy.kind,
            "grouping": strategy.grouping, "bucket_mb": task["bucket_mb"], "ps_count": task["ps"],
            "ps_placement": task["ps_placement"], "placement": task["placement"], "allreduce": task["allreduce"],
            "gpus_per_node": cluster.gpus_per_node, "nodes": -(-r.workers // cluster.gpus_per_node),
            "workers": r.workers, "bandwidth_bps": cluster.bandwidth_bps, "latency_s": cluster.latency_s,
            "framing": cluster.framing, "throughput": r.throughput, "likely_low": likely.get("low"),
            "likely_high": likely.get("high"), "likely_note": likely.get("reason", ""), "speedup": r.speedup,
            "efficiency": r.efficiency,
            "step_mean_s": r.iteration_s["mean"], "step_p95_s": r.iteration_s["p95"],
            "compute_s": r.breakdown.compute_s, "exposed_comm_s": r.breakdown.exposed_comm_s,
            "wait_s": r.breakdown.wait_s, "limited_by": r.limited_by, "bottleneck": r.bottleneck,
            "predict_time_s": r.predict_time_s,
        })
    return rows


# ---------------------------------------------------------------------- storage


class Store:
    """Rows on disk, appended a task at a time; reading it back tells which tasks are done."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        if self.path.suffix == ".csv":
            self.kind = "csv"
        elif self.path.suffix == ".parquet":
            self.kind = "parquet"
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise UserError("Parquet output needs pyarrow (pip install 'sgdscale[sweep]'); or use --output X.csv") \
                    from None
        else:
            raise UserError(f"--output {path}: give a .parquet or .csv file name")
        self.parts = Path(str(self.path) + ".parts")
        self._part = 0

    def read(self) -> list[dict[str, Any]]:
        """Every complete row written so far (a torn last CSV line is cut off)."""
        if self.kind == "csv":
            if not self.path.exists():
                return []
            self._truncate_torn_line()
            with self.path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                if reader.fieldnames and list(reader.fieldnames) != [c for c, _ in COLUMNS]:
                    raise UserError(f"{self.path} has other columns than a sweep writes; give another --output")
                return [_typed(row) for row in reader]
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = []
        files = ([self.path] if self.path.exists() else []) + sorted(self.parts.glob("part-*.parquet"))
        for file in files:
            try:
                table = pq.read_table(file)
            except Exception as error:
                raise UserError(f"{file} is not a readable Parquet file ({error}); move it away or give "
                                "another --output") from None
            if table.column_names != [c for c, _ in COLUMNS]:
                raise UserError(f"{file} has other columns than a sweep writes; give another --output")
            rows += table.to_pylist()
        if self.parts.exists():
            self._part = 1 + max((int(f.stem.split("-")[1]) for f in self.parts.glob("part-*.parquet")), default=0)
        return rows

    def _truncate_torn_line(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def append(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.kind == "csv":
            new = not self.path.exists() or self.path.stat().st_size == 0
            text = io.StringIO(newline="")
            writer = csv.DictWriter(text, fieldnames=[c for c, _ in COLUMNS])
            if new:
                writer.writeheader()
            writer.writerows([{k: ("" if v is None else v) for k, v in row.items()} for row in rows])
            data = text.getvalue().encode()
            # A task's rows land together or not at all: Ctrl-C waits until they are on disk (a
            # KeyboardInterrupt inside a buffered write once left part of a task behind, so the
            # resumed sweep saw a task half done).
            with _sigint_deferred():
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            return
        import pyarrow.parquet as pq

        self.parts.mkdir(parents=True, exist_ok=True)
        final = self.parts / f"part-{self._part:06d}.parquet"
        temporary = final.with_suffix(".tmp")
        pq.write_table(_arrow(rows), temporary)
        os.replace(temporary, final)
        self._part += 1

    def finish(self) -> None:
        """Parquet: merge the parts (and an earlier complete file) into the one output file."""
        if self.kind != "parquet" or not self.parts.exists():
            return
        import pyarrow.parquet as pq

        rows = self.read()
        temporary = self.path.with_suffix(".parquet.tmp")
        pq.write_table(_arrow(rows), temporary)
        os.replace(temporary, self.path)
        for file in self.parts.glob("*"):
            file.unlink()
        self.parts.rmdir()


@contextlib.contextmanager
def _sigint_deferred():
    """Hold SIGINT (Ctrl-C) back until the block is done; it is delivered right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _arrow(rows: list[dict[str, Any]]):
    import pyarrow as pa

    types = {"str": pa.string(), "float": pa.float64(), "int": pa.int64()}
    schema = pa.schema([(name, types[kind]) for name, kind in COLUMNS])
    return pa.Table.from_pylist(rows, schema=schema)


def _typed(row: dict[str, str]) -> dict[str, Any]:
    """A CSV row with the types Parquet keeps (an empty cell is None, except for text columns,
    where only the server and tensor placements can be absent)."""
    out: dict[str, Any] = {}
    for name, kind in COLUMNS:
        value = row.get(name, "")
        if value == "":
            out[name] = "" if kind == "str" and name not in ("ps_placement", "placement") else None
        elif kind == "int":
            out[name] = int(float(value))
        elif kind == "float":
            out[name] = float(value)
        else:
            out[name] = value
    return out


# ---------------------------------------------------------------------- running


@dataclass
class SweepStats:
    tasks: int
    reused: int  # tasks whose rows were already on disk
    computed: int
    rows: int
    wall_s: float
    predictions: int  # rows computed in this run


Progress = Callable[[int, int], None]  # (tasks done, tasks total)


def run_sweep(tasks: Sequence[dict[str, Any]], output: str, *, jobs: int | None = None,
              scheduler: str | None = None, progress: Progress | None = None) -> SweepStats:
    """Compute the tasks not yet in `output`, writing each task's rows as it finishes."""
    began = time.perf_counter()
    store = Store(output)
    done_keys = {row["task"] for row in store.read()}
    todo = [t for t in tasks if t["key"] not in done_keys]
    reused = len(tasks) - len(todo)
    computed = rows_written = 0
    if progress:
        progress(reused, len(tasks))
    for rows in _execute(todo, jobs, scheduler):  # an interruption leaves every finished task on disk
        store.append(rows)
        computed += 1
        rows_written += len(rows)
        if progress:
            progress(reused + computed, len(tasks))
    store.finish()
    total_rows = len(store.read())
    return SweepStats(tasks=len(tasks), reused=reused, computed=computed, rows=total_rows,
                      wall_s=time.perf_counter() - began, predictions=rows_written)


def _execute(tasks: Sequence[dict[str, Any]], jobs: int | None, scheduler: str | None) -> Iterable[list[dict]]:
    """Rows of each task in the order they finish: in this process (jobs=1), a local process pool,
    or a Dask distributed cluster at `scheduler`."""
    if not tasks:
        return
    if scheduler:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise UserError("--scheduler needs dask.distributed (pip install 'sgdscale[sweep]')") from None
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as error:
            raise UserError(f"cannot reach the Dask scheduler at {scheduler} ({error}); start one with "
                            "`dask scheduler` or drop --scheduler") from None
        try:
            futures = client.map(run_task, list(tasks), pure=False)
            try:
                for future in as_completed(futures):
                    yield future.result()
            finally:
                client.cancel(futures)
        finally:
            client.close()
        return
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        for task in tasks:
            yield run_task(task)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed as done_first

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_task, task) for task in tasks]
        try:
            for future in done_first(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def read_rows(output: str) -> list[dict[str, Any]]:
    return Store(output).read()
