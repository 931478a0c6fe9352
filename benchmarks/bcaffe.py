"""sgdscale against B-Caffe's published GoogLeNet traces (2, 4 and 8 nodes, 10GbE, K80 GPUs).

Inputs (benchmarks/public_data/bcaffe/, see its README): per-tensor backward times and measured
reduction times from `tmp<N>comm.log`, imported with `sgdscale import bcaffe`, and the OSU
`MPI_Allreduce` tables `allreduce{2,4,8}.log`, imported with `sgdscale import osu` into one
network file. For every worker count it compares:

1. Each gradient message's all-reduce: the time B-Caffe measured vs the time sgdscale predicts
   from the network file (interpolated between OSU points; message = one tensor on 2 and 4 nodes,
   one layer's weight+bias on 8 nodes, as the logs were made).
2. The iteration: the logs hold no wall-clock step time, so the reference is the step the trace
   itself implies: forward (0.5 x backward, the same assumption on both sides) + the logged
   backward times + the logged reduction times laid out by the WFBP rule (a message starts when it
   is ready and the previous one is done). sgdscale's fine predictor gets the same profile and the
   OSU network file, so the two differ only in the communication model. A third column feeds the
   measured reduction times through the same recurrence with sgdscale's predicted times to check
   the recurrence and predictor agree.

    PYTHONPATH=src .venv/bin/python benchmarks/bcaffe.py

Writes benchmarks/results/bcaffe.json (every message and case) and bcaffe.md (tables).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.fine import simulate
from sgdscale.importing.bcaffe import bcaffe_profile, osu_network, parse_bcaffe_log
from sgdscale.jsonio import atomic_output, write_json_atomic
from sgdscale.strategy import Strategy

HERE = Path(__file__).resolve().parent
DATA = HERE / "public_data" / "bcaffe"
RESULTS = HERE / "results"
WORKERS = (2, 4, 8)
SMALL_BYTES = 64 * 1024


def _messages(log, profile):
    """(name, bytes, ready_s, measured_s) per reduction in the order B-Caffe issued them."""
    ready = {t.name: t.grad_ready_s for t in profile.tensors}
    size = {t.name: t.bytes for t in profile.tensors}
    messages = []
    tensors = list(log.tensors)
    if log.merged_layers:  # weight and bias as one message, timed on the weight's line
        layers: dict[float, list] = {}
        for t in tensors:
            layers.setdefault((t.compute_us, t.tensor_id // 2), []).append(t)
        groups = list(layers.values())
    else:
        groups = [[t] for t in tensors]
    for group in groups:
        names = [f"param{t.tensor_id:03d}" for t in group]
        measured = [c for t in group for c in t.comm_us]
        if not measured:
            continue
        messages.append({
            "tensors": names, "bytes": sum(size[n] for n in names), "ready_s": max(ready[n] for n in names),
            "measured_s": statistics.fmean(c * 1e-6 for c in measured), "measured_samples_s": [c * 1e-6 for c in measured],
        })
    messages.sort(key=lambda m: (m["ready_s"], -int(m["tensors"][0][5:])))  # backward order, weight first
    return messages


def _wfbp_end(messages, key: str) -> float:
    """Backward + communication end: each message starts when ready and the previous one is done."""
    link_free = 0.0
    for m in messages:
        link_free = max(link_free, m["ready_s"]) + m[key]
    return link_free


def main() -> None:
    network = osu_network([DATA / f"allreduce{n}.log" for n in WORKERS])
    write_json_atomic(RESULTS / "bcaffe_network.json", network.to_json())
    comm = CommModel.from_network(network)
    cases = []
    for n in WORKERS:
        log = parse_bcaffe_log(DATA / f"tmp{n}comm.log")
        profile = bcaffe_profile(log, f"tmp{n}comm.log")
        messages = _messages(log, profile)
        for m in messages:
            m["predicted_s"] = comm.allreduce_s(m["bytes"], n)
            m["error"] = (m["predicted_s"] - m["measured_s"]) / m["measured_s"]
        small = [m for m in messages if m["bytes"] < SMALL_BYTES]
        large = [m for m in messages if m["bytes"] >= SMALL_BYTES]
        grouping = "per-layer" if log.merged_layers else "per-tensor"
        outcome = simulate(profile, Cluster(workers=n), Strategy("allreduce", grouping=grouping), comm,
                           iterations=5, warmup=1, variability=False)
        predicted_iter = float(outcome.iteration_s.mean())
        trace_iter = profile.forward_s + _wfbp_end(messages, "measured_s")
        recurrence_iter = profile.forward_s + _wfbp_end(messages, "predicted_s")

        def stats(group):
            if not group:
                return None
            errors = [m["error"] for m in group]
            return {"messages": len(group), "median_error": statistics.median(errors),
                    "median_abs_error": statistics.median(abs(e) for e in errors),
                    "max_abs_error": max(abs(e) for e in errors),
                    "sum_measured_s": sum(m["measured_s"] for m in group),
                    "sum_predicted_s": sum(m["predicted_s"] for m in group)}

        cases.append({
            "workers": n, "grouping": grouping, "messages": messages,
            "all": stats(messages), "small": stats(small), "large": stats(large),
            "forward_s": profile.forward_s, "backward_s": profile.backward_s,
            "iteration_trace_s": trace_iter, "iteration_predicted_s": predicted_iter,
            "iteration_recurrence_predicted_comm_s": recurrence_iter,
            "iteration_error": (predicted_iter - trace_iter) / trace_iter,
            "bottleneck": outcome.bottleneck,
        })
    write_json_atomic(RESULTS / "bcaffe.json", {"network": "bcaffe_network.json", "cases": cases})
    lines = [
        "# sgdscale vs B-Caffe GoogLeNet traces (benchmarks/bcaffe.py)", "",
        "Network: OSU MPI_Allreduce tables -> `sgdscale import osu` (fits below); profile: `sgdscale import bcaffe`.", "",
        "| workers | alpha | effective bandwidth |", "|---|---|---|",
    ]
    for k, fit in network.allreduce.items():
        lines.append(f"| {k} | {fit.alpha_s * 1e6:.1f} us | {8 / fit.beta_s_per_byte / 1e9:.2f} Gbit/s |")
    lines += ["", "## Per-message all-reduce: predicted from OSU vs measured by B-Caffe", "",
              "| workers | messages | median error | median abs error | max abs error | sum measured | sum predicted | small (<64 KiB) median error | large median error |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        a, s, l = c["all"], c["small"], c["large"]
        lines.append(f"| {c['workers']} ({c['grouping']}) | {a['messages']} | {a['median_error']:+.0%} | {a['median_abs_error']:.0%} | "
                     f"{a['max_abs_error']:.0%} | {a['sum_measured_s'] * 1e3:.1f} ms | {a['sum_predicted_s'] * 1e3:.1f} ms | "
                     f"{s['median_error']:+.0%} ({s['messages']}) | {l['median_error']:+.0%} ({l['messages']}) |")
    lines += ["", "## Iteration: sgdscale (fine, OSU network) vs the step the trace implies", "",
              "| workers | forward (assumed) | backward (logged) | trace-implied step | sgdscale predicted | error | same recurrence with predicted comm |",
              "|---|---|---|---|---|---|---|"]
    for c in cases:
        lines.append(f"| {c['workers']} | {c['forward_s'] * 1e3:.1f} ms | {c['backward_s'] * 1e3:.1f} ms | "
                     f"{c['iteration_trace_s'] * 1e3:.1f} ms | {c['iteration_predicted_s'] * 1e3:.1f} ms | "
                     f"{c['iteration_error']:+.1%} | {c['iteration_recurrence_predicted_comm_s'] * 1e3:.1f} ms |")
    text = "\n".join(lines) + "\n"
    with atomic_output(RESULTS / "bcaffe.md") as tmp:
        tmp.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
