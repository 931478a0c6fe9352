"""Import torch and torchvision the way this machine needs it.

PyPI's torchvision 0.28.0 does not import beside the CPU torch 2.13.0 wheel: its extension links
CUDA, so the operator schemas ``torchvision::nms``/``qnms`` never get defined and the import fails
at ``register_fake("torchvision::nms")`` (see docs/reference/ecosystem.md §0.1). Defining the two schemas
with ``torch.library`` makes the model definitions usable (detection ops stay unusable; we only need
the classification models). The shim runs only when the plain import fails, so a working
torchvision is never touched.
"""

from __future__ import annotations

import sys
from types import ModuleType

from sgdscale.errors import UserError

_shim_library = None  # keeps the torch.library.Library alive (its definitions die with it)


def import_torch() -> ModuleType:
    """Import torch or say how to install it."""
    try:
        import torch
    except ImportError:
        raise UserError(
            "profiling needs PyTorch, which is not installed; install it with "
            "`pip install 'sgdscale[torch]'` (pins torch==2.13.0, the CPU wheel)"
        ) from None
    return torch


def import_torchvision() -> ModuleType:
    """Import torchvision, defining the missing operator schemas if the plain import fails."""
    global _shim_library
    torch = import_torch()
    try:
        import torchvision
        return torchvision
    except ImportError:
        raise UserError(
            "the torchvision models need torchvision; install it with `pip install 'sgdscale[torch]'`"
        ) from None
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
    # Forget the half-imported package before importing it again.
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    if _shim_library is None:
        _shim_library = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            try:
                _shim_library.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:
                pass  # already defined (by the extension or an earlier shim): nothing to add
    import torchvision

    return torchvision
