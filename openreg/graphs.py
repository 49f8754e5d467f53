"""Graph capture and replay on openreg (torch.cuda.graphs' surface: Graph,
graph, graph_pool_handle, make_graphed_callables).

Capture and replay are ``torch.accelerator.Graph`` (csrc/runtime/OpenRegGraph.cpp
fills its backend hook): kernels launched on the current stream while it
captures are recorded, and ``replay()`` runs them again with one launch, on the
same memory (the graph's private pool). Tests: tests/runtime/test_graphs.py.
"""
import gc
from typing import Optional

import torch

from . import _C
from .device import _lazy_init


def graph_pool_handle() -> tuple:
    """A memory pool id that graphs can share (``torch.accelerator.Graph(pool=...)``),
    as ``torch.cuda.graph_pool_handle``."""
    _lazy_init()
    return _C._graph_pool_handle()


class Graph(torch.accelerator.Graph):
    """torch.cuda.CUDAGraph's counterpart: the generic ``torch.accelerator.Graph``
    (which openreg fills), with CUDAGraph's ``check_input_liveness``: a replay
    after a tensor the capture read from outside the graph was freed raises,
    naming where it was used and freed (openreg/_graph_inputs.py). Off by
    default, as CUDA's, unless the race checker is on (``None``: checked while
    ``torch.openreg.sanitizer`` is enabled at the capture)."""

    def __new__(cls, keep_graph: bool = False, *, pool=None, capture_error_mode="default",
                check_input_liveness: Optional[bool] = None):
        return super().__new__(cls, keep_graph, pool=pool, capture_error_mode=capture_error_mode)

    def __init__(self, keep_graph: bool = False, *, pool=None, capture_error_mode="default",
                 check_input_liveness: Optional[bool] = None):
        super().__init__(keep_graph, pool=pool, capture_error_mode=capture_error_mode)
        self.check_input_liveness = check_input_liveness
        self._inputs = None  # the InputLiveness of the last capture, if checked

    def capture_begin(self) -> None:
        self._stop_noting()
        self._inputs = None
        super().capture_begin()
        check = self.check_input_liveness
        if check is None:  # the race checker's setting
            check = torch.openreg.sanitizer.is_enabled()
        if check:
            from ._graph_inputs import InputLiveness

            self._inputs = InputLiveness()
            self._inputs.__enter__()

    def capture_end(self) -> None:
        try:
            super().capture_end()
        finally:
            self._stop_noting()

    def replay(self) -> None:
        if self._inputs is not None:
            self._inputs.check(self.pool())
        super().replay()

    def reset(self) -> None:
        self._stop_noting()
        self._inputs = None
        super().reset()

    def _stop_noting(self) -> None:
        if self._inputs is not None:
            self._inputs.stop()


class graph:
    """``torch.cuda.graph`` for openreg: captures the block into ``openreg_graph``
    on a side stream (``stream``, else one kept per device for captures), after
    synchronising and emptying the caches, and returns to the caller's stream.

    ``pool`` shares memory with other graphs (``graph_pool_handle()`` or another
    graph's ``pool()``; unset, the graph's own setting stays); ``capture_error_mode``
    is accepted as CUDA's (README: what it changes); ``check_input_liveness`` as
    ``Graph``'s. ``enable_annotations`` (CUDA driver kernel annotations) is not built."""

    _capture_streams: dict = {}

    def __init__(self, openreg_graph, pool=None, stream=None, capture_error_mode=None,
                 enable_annotations: bool = False, check_input_liveness: Optional[bool] = None):
        if enable_annotations:
            raise NotImplementedError("openreg graphs have no kernel annotations "
                                      "(torch.cuda.graph's enable_annotations)")
        if check_input_liveness is not None:  # None: the graph's own setting
            if not isinstance(openreg_graph, Graph):
                if check_input_liveness:
                    raise TypeError("check_input_liveness needs a torch.openreg.Graph")
            else:
                openreg_graph.check_input_liveness = check_input_liveness
        _lazy_init()
        device = torch.openreg.current_device()
        if stream is None:
            if device not in graph._capture_streams:
                graph._capture_streams[device] = torch.openreg.Stream(device)
            stream = graph._capture_streams[device]
        self.capture_stream = stream
        self.stream_context = torch.openreg.stream(stream)
        self.openreg_graph = openreg_graph
        if pool is not None:
            openreg_graph.graph_pool = pool
        if capture_error_mode is not None:
            openreg_graph.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.openreg.synchronize()
        # As torch.cuda.graph: collecting cycles (whose tensors would free memory) is
        # opt-in, since it is slow for several captures in a row.
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        torch.openreg.empty_cache()
        torch.accelerator.empty_host_cache()
        self.stream_context.__enter__()
        self.openreg_graph.capture_begin()

    def __exit__(self, *exc_info):
        try:
            self.openreg_graph.capture_end()
        finally:
            self.stream_context.__exit__(*exc_info)
        return False


def make_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False,
                           pool=None):
    """``torch.cuda.make_graphed_callables`` for openreg: each callable (a function or an
    ``nn.Module``) becomes one whose forward replays a captured graph of its forward and
    whose backward replays a captured graph of its backward, inside one autograd node.

    Arguments are as CUDA's: ``sample_args`` is a tuple of Tensors per callable (a tuple
    of such tuples when ``callables`` is a tuple); callables in a tuple share one memory
    pool and must be listed in the order they run. Each is warmed up
    ``num_warmup_iters`` times on a side stream, then its forwards are captured in that
    order and its backwards in reverse. Calls must pass tensors of the sample's shapes
    and dtypes, in the same order; a module runs its graphs only in the training mode
    it was captured in, and its ordinary forward otherwise."""
    # The cache would keep warm-up's casts of the weights in the graphs.
    if torch.is_autocast_enabled("openreg") and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching. "
                           "Please set `cache_enabled=False`.")
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError(f"make_graphed_callables: {len(callables)} callables but "
                         f"{len(sample_args)} sample_args tuples")
    surfaces = []  # per callable: (flat user args, module parameters)
    for fn, args in zip(callables, sample_args):
        if isinstance(fn, torch.nn.Module):
            if fn._backward_hooks or fn._forward_hooks or fn._forward_pre_hooks:
                raise RuntimeError("Modules must not have hooks registered at the time they are "
                                   "passed. However, registering hooks on modules after passing "
                                   "them through make_graphed_callables is allowed.")
            if any(b.requires_grad for b in fn.buffers()):
                raise RuntimeError("In any nn.Module passed to make_graphed_callables, only "
                                   "parameters may be trainable. All buffers must have "
                                   "requires_grad=False.")
        flat = tuple(torch.utils._pytree.arg_tree_leaves(*args))
        if not all(isinstance(a, torch.Tensor) for a in flat):
            raise TypeError("make_graphed_callables: sample_args for each callable must contain "
                            "only Tensors")
        params = tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else ()
        surfaces.append((flat, params))

    def differentiable(tensors):
        return tuple(t for t in tensors if t.requires_grad)

    def run_backward(outputs, inputs, grad_outputs):
        outputs, inputs = differentiable(outputs), differentiable(inputs)
        if not outputs or not inputs:
            return (None,) * len(inputs)
        return torch.autograd.grad(outputs=outputs, inputs=inputs,
                                   grad_outputs=tuple(g for g in grad_outputs if g is not None),
                                   only_inputs=True, allow_unused=allow_unused_input)

    # Warm-up on a side stream, as CUDA's: lazy initialisations (cuBLAS-style
    # workspaces, autograd's accumulators) happen outside the capture.
    torch.openreg.synchronize()
    outputs = grads = None  # num_warmup_iters may be 0
    with torch.openreg.stream(torch.openreg.Stream()):
        for fn, (flat, params), args in zip(callables, surfaces, sample_args):
            for _ in range(num_warmup_iters):
                outputs = torch.utils._pytree.tree_leaves(fn(*args))
                grads = tuple(torch.empty_like(o) if o.requires_grad else None for o in outputs)
                run_backward(outputs, flat + params, grads)
            del outputs, grads
    torch.openreg.synchronize()

    pool = graph_pool_handle() if pool is None else pool
    captures = []
    for fn, (flat, params), args in zip(callables, surfaces, sample_args):
        forward_graph = Graph()
        with graph(forward_graph, pool=pool):
            outputs, output_spec = torch.utils._pytree.tree_flatten(fn(*args))
        captures.append(_GraphedCallable(flat, params, forward_graph, tuple(outputs), output_spec))
    # Backwards in reverse order: memory the later forwards' backwards free is reused.
    for capture in reversed(captures):
        capture.capture_backward(run_backward, pool)

    graphed = []
    for fn, capture in zip(callables, captures):
        if isinstance(fn, torch.nn.Module):
            fn.forward = _graphed_forward(fn, capture, fn.training, fn.forward)
            graphed.append(fn)
        else:
            graphed.append(capture)
    return graphed[0] if single else tuple(graphed)


class _GraphedCallable:
    """One callable's captured forward and backward, behind one autograd.Function."""

    def __init__(self, user_inputs, params, forward_graph, outputs, output_spec):
        self.inputs = user_inputs + params  # the graphs' static inputs
        self.user_count = len(user_inputs)
        self.forward_graph = forward_graph
        self.outputs = outputs
        self.output_spec = output_spec
        self.function = None

    def capture_backward(self, run_backward, pool):
        grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None for o in self.outputs)
        backward_graph = None
        grads = ()
        if any(o.requires_grad for o in self.outputs) and any(i.requires_grad for i in self.inputs):
            backward_graph = Graph()
            with graph(backward_graph, pool=pool):
                grads = run_backward(self.outputs, self.inputs, grad_outputs)
        # One gradient slot per static input (None where it needs none).
        grads = iter(grads)
        grad_inputs = tuple(next(grads, None) if i.requires_grad else None for i in self.inputs)
        # Outputs leave the graph detached, and the capture's autograd graph goes:
        # the autograd node below owns their history.
        self.outputs = tuple(o.detach() for o in self.outputs)
        self.function = _graphed_function(self.inputs, self.forward_graph, self.outputs,
                                          backward_graph, grad_outputs, grad_inputs)

    def __call__(self, *args):
        flat = torch.utils._pytree.arg_tree_leaves(*args)
        if len(flat) != self.user_count:
            raise TypeError(f"graphed callable: expected {self.user_count} tensor arguments "
                            f"as in sample_args, got {len(flat)}")
        outputs = self.function.apply(*flat, *self.inputs[self.user_count:])
        return torch.utils._pytree.tree_unflatten(outputs, self.output_spec)


def _graphed_function(static_inputs, forward_graph, static_outputs, backward_graph,
                      static_grad_outputs, static_grad_inputs):
    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, given in zip(static_inputs, inputs):
                if static.shape != given.shape or static.dtype != given.dtype:
                    raise RuntimeError(
                        f"graphed callable: an argument of shape {tuple(given.shape)} and dtype "
                        f"{given.dtype} where the capture had {tuple(static.shape)} and "
                        f"{static.dtype}")
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            forward_graph.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            for static, grad in zip(static_grad_outputs, grads):
                if static is not None and grad is not None and static.data_ptr() != grad.data_ptr():
                    static.copy_(grad)
            if backward_graph is not None:
                backward_graph.replay()
            return tuple(g.detach() if g is not None else None for g in static_grad_inputs)

    return Graphed


def _graphed_forward(module, capture, training, eager_forward):
    def forward(*args, **kwargs):
        if module.training == training and not kwargs:
            return capture(*args)
        return eager_forward(*args, **kwargs)
    return forward
