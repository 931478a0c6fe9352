"""Communication cost models: alpha-beta point-to-point and collectives, fitted from benchmarks."""

from sgdscale.comm.cost import ALGORITHMS, CommModel
from sgdscale.comm.network import NETWORK_SCHEMA, AlphaBeta, Network, fit_alpha_beta, load_network

__all__ = ["ALGORITHMS", "CommModel", "NETWORK_SCHEMA", "AlphaBeta", "Network", "fit_alpha_beta", "load_network"]
