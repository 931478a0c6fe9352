"""Bad input, fuzzed: 10,000 mutated profiles, network and cluster files and option values run
through the real CLI (in-process, torch-free), counted by how each ended.

Cases come from tests/fuzz_cases.py (the generator the suite's hypothesis test uses), seeded per
case, so case i is reproducible alone: `python benchmarks/fuzz.py --only i`. Outcomes: finite
result (exit 0, nothing non-finite printed or written), clean error (exit 2, one line), traceback,
nan, timeout (over --timeout-s), unclean error (any other exit or a multi-line message).

    nice -n 19 env PYTHONPATH=src .venv/bin/python benchmarks/fuzz.py            # 10,000 cases
Writes benchmarks/results/fuzz.json (every case: kind, outcome, seconds, message) and fuzz.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import resource
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from random import Random

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_cases import OUTCOMES, base_profile, make_case, run_case  # noqa: E402

from sgdscale.jsonio import atomic_output  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--only", type=int, default=None, help="run case I alone and print its argv and outcome")
    parser.add_argument("--out", default=str(RESULTS / "fuzz"), help="output prefix (.json and .md)")
    parser.add_argument("--code", default="this checkout", help="what sgdscale on PYTHONPATH is, for the record")
    args = parser.parse_args()
    # A memory blow-up must show as a MemoryError (a traceback), not take the machine down.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    profiles = {name: base_profile(name) for name in ("cnn", "mlp")}
    cases = [args.only] if args.only is not None else range(args.cases)
    rows = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sgdscale-fuzz-") as tmp:
        for index in cases:
            rng = Random(f"{args.seed}-{index}")
            kind, argv, out = make_case(rng, Path(tmp) / "case", profiles)
            outcome, detail, seconds = run_case(argv, out, args.timeout_s)
            if args.only is not None:
                print(" ".join(argv).replace(tmp, "$TMP"))
                print(outcome, detail)
                return
            rows.append({"case": index, "kind": kind, "outcome": outcome, "seconds": round(seconds, 4),
                         "message": detail[:200].replace(tmp, "$TMP").replace("\n", " / ")})
            if index % 500 == 499:
                counts = collections.Counter(r["outcome"] for r in rows)
                print(f"{index + 1} cases, {time.perf_counter() - began:.0f} s: {dict(counts)}", flush=True)
    wall_s = time.perf_counter() - began
    counts = {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}
    by_kind = {k: {o: sum(r["outcome"] == o for r in rows if r["kind"] == k) for o in OUTCOMES}
               for k in sorted({r["kind"] for r in rows})}
    seconds = sorted(r["seconds"] for r in rows)
    summary = {
        "cases": len(rows), "seed": args.seed, "timeout_s": args.timeout_s, "wall_s": round(wall_s, 1),
        "counts": counts, "by_kind": by_kind,
        "case_seconds": {"median": statistics.median(seconds), "p99": seconds[int(0.99 * (len(seconds) - 1))],
                         "max": seconds[-1]},
        "code": args.code,
        "python": platform.python_version(), "machine": platform.machine(),
        "command": f"nice -n 19 env PYTHONPATH={os.environ.get('PYTHONPATH', '')} .venv/bin/python benchmarks/fuzz.py "
                   + shlex.join(sys.argv[1:]),
        "slowest": sorted(rows, key=lambda r: -r["seconds"])[:5],
    }
    columns = ["case", "kind", "outcome", "seconds", "message"]
    with atomic_output(f"{args.out}.json") as tmp:  # one case per line: 10,000 lines, not 70,000
        tmp.write_text(f'{{"summary": {json.dumps(summary, indent=1)},\n "columns": {json.dumps(columns)},\n "cases": [\n'
                       + ",\n".join(json.dumps([r[c] for c in columns]) for r in rows) + "\n]}\n")
    lines = [f"# Bad input, fuzzed ({len(rows):,} cases, seed {args.seed}; code: {args.code})", "",
             f"Command: `{summary['command']}`; {wall_s:.0f} s in all, per case median "
             f"{summary['case_seconds']['median'] * 1e3:.0f} ms, p99 {summary['case_seconds']['p99'] * 1e3:.0f} ms, "
             f"max {summary['case_seconds']['max']:.2f} s.", "",
             "| kind | " + " | ".join(OUTCOMES) + " |", "|---|" + "---:|" * len(OUTCOMES)]
    for kind, row in by_kind.items():
        lines.append(f"| {kind} | " + " | ".join(f"{row[o]:,}" for o in OUTCOMES) + " |")
    lines.append("| **all** | " + " | ".join(f"**{counts[o]:,}**" for o in OUTCOMES) + " |")
    bad = [r for r in rows if r["outcome"] not in ("finite result", "clean error")]
    lines += ["", f"Cases that did not end in a finite result or a clean error: {len(bad)}"]
    lines += [f"- case {r['case']} ({r['kind']}): {r['outcome']}: {r['message']}" for r in bad[:30]]
    lines += ["", "Slowest cases:"] + [f"- case {r['case']} ({r['kind']}, {r['outcome']}): {r['seconds']:.2f} s"
                                       for r in summary["slowest"]]
    examples = collections.OrderedDict()
    for r in rows:
        if r["outcome"] == "clean error":
            examples.setdefault(r["kind"], r["message"])
    lines += ["", "One clean error per kind, as printed:"] + [f"- {k}: `{m}`" for k, m in examples.items()]
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
