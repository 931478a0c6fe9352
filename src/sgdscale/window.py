"""How many steps a measurement takes: at least a minimum window of time, on a machine whose speed
drifts from minute to minute (validation's runs, `sgdscale.validation`, and its profiles,
`sgdscale.profiling.profiler`)."""

from __future__ import annotations

import math

# A window grows to at most this many times the steps asked for.
MAX_WINDOW_FACTOR = 10


def window_steps(steps: int, step_s: float | None, min_window_s: float, at_most: int) -> int:
    """`steps`, or more where that many steps of `step_s` last under `min_window_s`, up to `at_most`
    (never fewer than `steps`); `steps` where the step is unknown."""
    if min_window_s <= 0 or not step_s or step_s <= 0:
        return steps
    return max(steps, min(at_most, math.ceil(min_window_s / step_s)))
