"""Tells PyTorch about the "openreg" device (the Python side of PrivateUse1):
- renames the backend (``torch.utils.rename_privateuse1_backend``), installs
  ``torch.openreg`` (``torch._register_device_module``) and generates the
  ``Tensor.openreg()`` / ``is_openreg`` style helpers
  (``generate_methods_for_privateuse1_backend``);
- registers the graph backend for ``torch.accelerator.Graph``
  (``GraphImplRegistry``, csrc/runtime/OpenRegGraph.cpp);
- once ``torch._dynamo`` is imported: Dynamo's device interface
  (``register_interface_for_device``) and its constant folds;
- once ``torch._inductor.compile_fx`` is imported: the Inductor backend
  (``register_backend_for_device``, openreg/_inductor);
- torch's RNG wrappers for recomputed random ops under torch.compile
  (``torch._prims.rng_prims``, openreg/_rng_prims.py).
"""
import importlib.abc
import importlib.util
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
    # Dynamo's device interface for openreg, from Dynamo's first trace on
    # (importing Dynamo costs a second: not before someone does).
    _after_import("torch._dynamo", _register_dynamo_interface)
    # Inductor's code generators, keyed in its FX graph cache (openreg/_inductor).
    _after_import("torch._inductor.compile_fx", _register_inductor_backend)
    # torch.compile of checkpointed random ops (openreg/_rng_prims.py).
    _after_import("torch._prims.rng_prims", _register_rng_prims)


def _register_dynamo_interface() -> None:
    from . import _device_interface

    _device_interface.register()
    # What Dynamo folds to constants for torch.cuda (its trace rules), without
    # a graph break at the pybind calls behind them.
    module = sys.modules["openreg"]
    for fn in (module.is_available, module.device_count, module.get_device_properties,
               module.get_device_name, module.get_device_capability):
        torch._dynamo.assume_constant_result(fn)


def _register_rng_prims() -> None:
    from . import _rng_prims

    _rng_prims.register()


def _register_inductor_backend() -> None:
    from . import _inductor

    _inductor.register_backend()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `callback` once module `name` has been imported (found by the other
    finders; this one only wraps its loader)."""

    def __init__(self, name, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_call(module):
            exec_module(module)
            self.callback()

        spec.loader.exec_module = exec_then_call
        return spec


def _after_import(name, callback) -> None:
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))
