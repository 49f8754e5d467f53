"""Tells PyTorch about the "openreg" device (the Python side of PrivateUse1):
renames the backend, installs ``torch.openreg``, and generates the
``Tensor.openreg()`` / ``is_openreg`` style helpers.
"""
import sys

import torch

_done = False


def register() -> None:
    global _done
    if _done:
        return
    _done = True
    torch.utils.rename_privateuse1_backend("openreg")
    module = sys.modules["openreg"]
    torch._register_device_module("openreg", module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    # torch.accelerator.Graph finds a backend's graphs by the backend's name.
    from . import _C

    _C._register_graph_impl()
