"""Property: any mutated profile, network or cluster file, or mistyped option value, ends in a
finite result or a clean one-line error (exit 2), never a traceback, a hang or a NaN.

Hypothesis drives the `random.Random` that tests/fuzz_cases.py draws every choice from, so a
failing case shrinks to a small one; benchmarks/fuzz.py runs 10,000 of the same cases. Each
example runs the real CLI in-process; the whole test stays well under a minute.
"""

from __future__ import annotations

from pathlib import Path

from fuzz_cases import base_profile, make_case, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PROFILES = {name: base_profile(name) for name in ("cnn", "mlp")}


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_bad_input_ends_cleanly(tmp_path: Path, rng) -> None:
    kind, argv, out = make_case(rng, tmp_path / "case", PROFILES)
    outcome, detail, _seconds = run_case(argv, out, timeout_s=60.0)
    assert outcome in ("finite result", "clean error"), f"{kind}: {' '.join(argv)} -> {outcome}: {detail}"
