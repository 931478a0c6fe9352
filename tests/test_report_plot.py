"""Plots: the PNGs are written whole, have the expected size, and handle partial inputs."""

from __future__ import annotations

import matplotlib.image as mpimg
import pytest

from sgdscale.report.plot import plot_prediction, plot_validation
from sgdscale.result import Breakdown, Prediction, Result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def result(workers, method, throughput, base):
    return Result(workers=workers, method=method, throughput=throughput,
                  iteration_s={"mean": 0.1, "p50": 0.1, "p95": 0.12}, speedup=throughput / base,
                  efficiency=throughput / base / workers, breakdown=Breakdown(0.08, 0.01 * workers ** 0.5, 0.005),
                  bottleneck="test")


def prediction(methods=("fine", "coarse")):
    results = [result(n, m, 100 * n ** 0.9 * (1.02 if m == "coarse" else 1), 100) for m in methods
               for n in (1, 2, 4, 8, 16)]
    inputs = {"profile": {"model": "resnet50", "batch_size": 32},
              "cluster": {"bandwidth_bps": 10e9, "latency_s": 20e-6, "ps_count": 1},
              "strategy": {"kind": "allreduce", "grouping": "buckets"}}
    return Prediction(inputs=inputs, results=results)


@pytest.mark.parametrize("methods", [("fine", "coarse"), ("coarse",)])
def test_plot_prediction_writes_png(tmp_path, methods):
    path = tmp_path / "plots" / "p.png"
    plot_prediction(prediction(methods), path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    height, width, _ = mpimg.imread(path).shape
    assert width > 1000 and height > 400
    assert [p.name for p in path.parent.iterdir()] == ["p.png"]


def test_plot_prediction_empty_inputs(tmp_path):
    path = tmp_path / "empty.png"
    plot_prediction(Prediction(inputs={}, results=[]), path)
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_plot_validation_writes_png(tmp_path):
    cases = [
        {"predicted": 105.0, "measured": 100.0, "method": "fine", "strategy": "allreduce", "label": "2w"},
        {"predicted": 180.0, "measured": 200.0, "method": "coarse", "strategy": "ps-sync", "label": "4w"},
        {"predicted": 390.0, "measured": 400.0, "method": "coarse", "strategy": "ps-async"},
    ]
    path = tmp_path / "v.png"
    plot_validation(cases, path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    height, width, _ = mpimg.imread(path).shape
    assert width > 500 and height > 500


def test_plot_says_what_the_table_says():
    """Each breakdown bar carries its result's limited_by; a >10% method gap is marked (issue 11)."""
    import matplotlib.pyplot as plt

    from sgdscale.report.plot import prediction_figure

    data = prediction()
    for r in data.results:
        r.limited_by = "NIC" if r.workers > 2 else "compute"
    data.results[-1].throughput *= 1.5  # coarse at 16 workers now 50% above fine
    fig = prediction_figure(data)
    try:
        ax_tp, ax_bd = fig.axes
        fine = [r for r in data.results if r.method == "fine"]
        assert [t.get_text() for t in ax_bd.texts] == [r.limited_by for r in fine]
        (gap,) = data.disagreements()
        assert [t.get_text() for t in ax_tp.texts] == [f"methods differ {gap['difference']:.0%}"]
    finally:
        plt.close(fig)
