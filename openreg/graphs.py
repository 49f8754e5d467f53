"""Graph capture and replay on openreg (torch.cuda.graphs' surface).

Capture and replay are ``torch.accelerator.Graph`` (csrc/runtime/OpenRegGraph.cpp
fills its backend hook): kernels launched on the current stream while it
captures are recorded, and ``replay()`` runs them again with one launch, on the
same memory (the graph's private pool). Tests: tests/runtime/test_graphs.py.
"""
from . import _C
from .device import _lazy_init


def graph_pool_handle() -> tuple:
    """A memory pool id that graphs can share (``torch.accelerator.Graph(pool=...)``),
    as ``torch.cuda.graph_pool_handle``."""
    _lazy_init()
    return _C._graph_pool_handle()
