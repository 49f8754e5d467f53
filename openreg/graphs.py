"""Graph capture and replay on openreg (torch.cuda.graphs' surface: Graph,
graph, graph_pool_handle).

Capture and replay are ``torch.accelerator.Graph`` (csrc/runtime/OpenRegGraph.cpp
fills its backend hook): kernels launched on the current stream while it
captures are recorded, and ``replay()`` runs them again with one launch, on the
same memory (the graph's private pool). Tests: tests/runtime/test_graphs.py.
"""
import gc

import torch

from . import _C
from .device import _lazy_init


def graph_pool_handle() -> tuple:
    """A memory pool id that graphs can share (``torch.accelerator.Graph(pool=...)``),
    as ``torch.cuda.graph_pool_handle``."""
    _lazy_init()
    return _C._graph_pool_handle()


# torch.cuda.CUDAGraph's counterpart (the generic class, which openreg fills).
Graph = torch.accelerator.Graph


class graph:
    """``torch.cuda.graph`` for openreg: captures the block into ``openreg_graph``
    on a side stream (``stream``, else one kept per device for captures), after
    synchronising and emptying the cache, and returns to the caller's stream.

    ``pool`` shares memory with other graphs (``graph_pool_handle()`` or another
    graph's ``pool()``); ``capture_error_mode`` is accepted as CUDA's and has no
    effect here."""

    _capture_streams: dict = {}

    def __init__(self, openreg_graph, pool=None, stream=None, capture_error_mode="global"):
        _lazy_init()
        device = torch.openreg.current_device()
        if stream is None:
            if device not in graph._capture_streams:
                graph._capture_streams[device] = torch.openreg.Stream(device)
            stream = graph._capture_streams[device]
        self.capture_stream = stream
        self.stream_context = torch.openreg.stream(stream)
        self.openreg_graph = openreg_graph
        openreg_graph.graph_pool = pool
        openreg_graph.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.openreg.synchronize()
        gc.collect()  # tensors of dead cycles free their memory before the capture
        torch.openreg.empty_cache()
        self.stream_context.__enter__()
        self.openreg_graph.capture_begin()

    def __exit__(self, *exc_info):
        try:
            self.openreg_graph.capture_end()
        finally:
            self.stream_context.__exit__(*exc_info)
        return False
