"""sgdscale: predict data-parallel SGD throughput on N machines from a one-machine profile.

`sgdscale.predict("resnet50", workers=[1, 8, 64], bandwidth="10Gbit")` is the one-call API
(`sgdscale.api.predict`): it returns the document `sgdscale predict --json` writes.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`sgdscale.predict`, loaded on first use (the CLI starts without numpy): the predictor-core
    submodule, which is callable as `sgdscale.api.predict` (see the end of sgdscale/predict.py)."""
    if name == "predict":
        import importlib

        return importlib.import_module("sgdscale.predict")
    raise AttributeError(f"module 'sgdscale' has no attribute {name!r}")
