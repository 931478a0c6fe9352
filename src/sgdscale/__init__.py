"""sgdscale: predict data-parallel SGD throughput on N machines from a one-machine profile."""

__version__ = "0.1.0"
