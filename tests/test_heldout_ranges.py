"""The 80% ranges `predict` states: made from the kept held-out record, and shown only where it applies."""

from __future__ import annotations

import json
from pathlib import Path

from sgdscale import heldout_ranges as hr
from sgdscale.cli import main

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def kept_sets(numbers) -> dict[int, list[dict]]:
    return {n: json.loads((RESULTS / f"accuracy-heldout{n}" / "results.json").read_text())["cases"]
            for n in numbers if (RESULTS / f"accuracy-heldout{n}" / "results.json").exists()}


def test_shipped_ranges_are_what_the_kept_results_make():
    shipped = hr.shipped().data
    # sets predicted before framing was counted (benchmarks/link_payload.py) or before the budget path had
    # its interference (benchmarks/budget_interference.py): every factor file, multiplied
    factors = hr.merged_factors(json.loads((RESULTS.parent.parent / path).read_text())["sets"]
                                for path in shipped["factor_files"])
    remade = hr.build(hr.with_factors(kept_sets(shipped["sets"]), factors), generated_by=shipped["generated_by"],
                      factor_files=shipped["factor_files"])
    assert remade == shipped, "rerun benchmarks/heldout_ranges.py --write-data after changing the held-out record"


def test_widening_is_the_least_that_covers_left_out_sets():
    sets = kept_sets(range(18, 42))
    widening = hr.leave_one_set_out(sets)
    assert set(widening) == set(hr.SOURCES)
    for source, w in widening.items():
        assert w["inside"] >= 0.8 > w["plain_inside"], (source, w)  # plain percentiles were too narrow
        # one grid step less would have fallen short of 80% on the left-out sets
        smaller = hr.WIDENING_GRID[hr.WIDENING_GRID.index(w["factor"]) - 1]
        held = []
        for number, cases in sets.items():
            bins = hr.plain_bins(c for other, rest in sets.items() if other != number for c in rest)
            for case in cases:
                for (method, src), ratio in hr.case_ratios(case).items():
                    entry = bins.get((case["strategy"], method, src, case["kind"]))
                    if src == source and entry is not None:
                        held.append((ratio, entry))
        inside = sum(lo <= r <= hi for r, e in held for lo, hi in [hr.widened(e, smaller)]) / len(held)
        assert inside < 0.8 and len(held) == w["scored"]


def test_ranges_bracket_the_median_ratio_and_widen_the_plain_ones():
    for entry in hr.shipped().data["bins"]:
        assert entry["low"] <= entry["plain_low"] <= entry["median"] <= entry["plain_high"] <= entry["high"]
        assert entry["cases"] >= hr.MIN_CASES


def test_predict_states_a_range_inside_the_envelope_and_why_not_outside(tmp_path, capsys):
    out_json = tmp_path / "p.json"
    code = main(["predict", "gpt2", "--strategy", "ps-async", "--workers", "1,3", "--bandwidth", "400Mbit",
                 "--iterations", "20", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0
    results = {(r["workers"], r["method"]): r for r in json.loads(out_json.read_text())["results"]}
    for method in ("fine", "coarse"):
        ranged = results[(3, method)]
        entry = hr.shipped().bin("ps-async", method, "nominal", "real")
        assert ranged["likely_range"]["low"] == ranged["throughput"] * entry["low"]
        assert ranged["likely_range"]["high"] == ranged["throughput"] * entry["high"]
        assert ranged["likely_range"]["source"] == "nominal" and ranged["likely_range"]["cases"] == entry["cases"]
        assert "1 worker (held-out parameter-server sets ran" in results[(1, method)]["likely_range"]["reason"]
    low, high = results[(3, "fine")]["likely_range"]["low"], results[(3, "fine")]["likely_range"]["high"]
    assert f"{low:,.1f}-{high:,.1f}" in out
    assert "80% range: none where held-out validation ran nothing alike: 1 worker" in out


def test_each_network_source_picks_its_own_bin(tmp_path):
    ranges = hr.shipped()
    assert hr.network_source("net.json", 0.3) == "measured"
    assert hr.network_source(None, 0.3) == "budget"
    assert hr.network_source(None, None) == "nominal"
    inputs = {"cluster": {"bandwidth_bps": 1e9, "ps_count": 1}, "strategy": {"kind": "ps-sync", "grouping": "per-tensor"},
              "profile": {"device": "cpu"}}
    spans = {s: hr.likely_range(inputs, 3, "fine", 10.0, s, ranges) for s in hr.SOURCES}
    for source, span in spans.items():
        entry = ranges.bin("ps-sync", "fine", source, "real")
        assert (span["low"], span["high"]) == (10.0 * entry["low"], 10.0 * entry["high"])


def test_no_range_beyond_what_held_out_sets_ran():
    ranges = hr.shipped()
    base = {"cluster": {"bandwidth_bps": 1e9, "ps_count": 1}, "strategy": {"kind": "allreduce", "grouping": "buckets"},
            "profile": {"device": "cpu: some CPU"}}
    assert ranges.outside(base, 3) is None
    for change, words in (({"cluster": {"bandwidth_bps": 100e9, "ps_count": 1}}, "Mbit/s link"),
                          ({"profile": {"device": "cuda: NVIDIA H100"}}, "GPU profile"),
                          ({"profile": {"device": "cpu", "calibration": ["device-throughput"]}}, "scaled"),
                          ({"cluster": {"bandwidth_bps": 1e9, "gpus_per_node": 8}}, "multi-device nodes"),
                          ({"strategy": {"kind": "allreduce", "grouping": "single"}}, "grouping single")):
        assert words in ranges.outside({**base, **change}, 3)
    assert "64 workers" in ranges.outside(base, 64)


def test_worker_counts_are_bounded_per_strategy():
    """All-reduce sets ran more workers than any parameter-server set: a count only all-reduce ran
    gets a range for all-reduce and none for a parameter server."""
    ranges = hr.shipped()
    span = ranges.data["envelope"]["workers"]
    beyond_ps = span["allreduce"][1]
    assert beyond_ps > max(span["ps-sync"][1], span["ps-async"][1])
    inputs = {"cluster": {"bandwidth_bps": 1e9, "ps_count": 1}, "profile": {"device": "cpu"}}
    assert ranges.outside({**inputs, "strategy": {"kind": "allreduce", "grouping": "buckets"}}, beyond_ps) is None
    for kind in ("ps-sync", "ps-async"):
        reason = ranges.outside({**inputs, "strategy": {"kind": kind, "grouping": "per-tensor"}}, beyond_ps)
        assert reason == f"{beyond_ps} workers (held-out parameter-server sets ran {span[kind][0]}-{span[kind][1]})"


def test_nominal_note_quotes_the_shipped_medians():
    note = hr.median_bias_note()
    ranges = hr.shipped()
    for source in ("nominal", "budget", "measured"):
        medians = "/".join(f"{ranges.bin(k, 'fine', source, 'real')['median']:.2f}" for k in hr.STRATEGIES)
        assert f"{medians} from {hr.SOURCE_WORDS[source]}" in note


def test_validate_says_how_many_cases_fell_inside():
    from sgdscale.commands.validate import range_line

    cases = kept_sets([42])[42]
    rows = [r for r in hr.coverage(hr.shipped(), cases) if r["source"] == "measured" and r["method"] == "fine"]
    line = range_line(cases)
    assert f"from a measured network file fine {sum(r['inside'] for r in rows)}/{len(rows)}," in line
    assert line.startswith("measured inside the 80% range `sgdscale predict` states (made from held-out sets 18-")
    assert range_line([]) is None


def test_sets_are_named_as_runs_of_consecutive_numbers():
    assert hr.describe_sets([22, 18, 19, 20, 47, 48]) == "18-20, 22, 47-48"
    assert hr.describe_sets([5]) == "5"
    shipped = hr.shipped().data["sets"]
    assert hr.describe_sets(shipped).startswith(f"{shipped[0]}-")
