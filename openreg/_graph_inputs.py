"""``check_input_liveness`` for openreg graphs (torch.cuda.CUDAGraph's option).

A graph replays its kernels on the addresses they had at capture: a tensor the
capture read from outside the graph's pool must outlive the graph, or a replay
reads freed (perhaps reused) device memory, silently. With the option on, a
dispatch mode notes each such input while the capture runs, and ``replay()``
raises if any is gone, naming where it was used and where it was freed.
Tests: tests/runtime/test_graphs.py.
"""
import traceback
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_iter


def _plain_tensors(tree):
    """The plain tensors in `tree`, a wrapper subclass's (a DTensor's local
    tensor) in its place: a wrapper has no storage, and the mode does not see
    the ops it runs on its inner tensors."""
    for t in tree_iter(tree):
        if not isinstance(t, torch.Tensor):
            continue
        if is_traceable_wrapper_subclass(t):
            names, _ = t.__tensor_flatten__()
            yield from _plain_tensors([getattr(t, name) for name in names])
        else:
            yield t


def _stack(skip: int) -> str:
    return "".join(traceback.format_stack()[:-skip])


class _Input:
    """A tensor a capture read: alive while its storage is, at the same address."""

    def __init__(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        self.address, self.device = storage.data_ptr(), tensor.device
        self.used_at, self.freed_at = _stack(4), None

        def freed(_ref) -> None:
            try:
                self.freed_at = _stack(1)
            except Exception:  # never raise in a finalizer
                pass

        self.storage = weakref.ref(storage, freed)

    def alive(self) -> bool:
        storage = self.storage()
        return storage is not None and storage.data_ptr() == self.address


class InputLiveness(TorchDispatchMode):
    """Notes the openreg (and pinned host) tensors each captured op reads that
    no earlier captured op wrote; ``check`` before each replay."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: dict = {}   # storage address -> _Input
        self.outputs: set = set()  # storage addresses the capture produced
        self._noting = True  # entered, until stop()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if torch.openreg.is_current_stream_capturing():
            for t in _plain_tensors((args, kwargs)):
                if t.is_openreg or t.is_pinned():
                    address = t.untyped_storage().data_ptr()
                    if address and address not in self.outputs and address not in self.inputs:
                        self.inputs[address] = _Input(t)
            for t in _plain_tensors(out):
                if t.is_openreg:
                    self.outputs.add(t.untyped_storage().data_ptr())
        return out

    def stop(self) -> None:
        """Leaves the mode (at the capture's end); idempotent."""
        if self._noting:
            self._noting = False
            self.__exit__(None, None, None)

    def check(self, pool) -> None:
        # A dead input whose address lies in the graph's own pool was the graph's
        # memory all along, which the pool keeps for it, freed or not: a static
        # input made during the capture, a storage the capture resized (FSDP's
        # unsharded parameters), another graph's output in a shared pool. (CUDA's
        # check counts every block of the pool, inactive ones too.)
        dead = [i for i in self.inputs.values() if not i.alive() and not _in_pool(i, pool)]
        if not dead:
            return
        parts = [f"openreg graph replay detected {len(dead)} dead tensor(s): inputs the "
                 "capture read were freed, and the replay would read their memory.\n"]
        for k, i in enumerate(dead[:5], 1):
            parts.append(f"Dead tensor #{k} (data_ptr={i.address:#x}, {i.device}), used in "
                         f"the capture at:\n{i.used_at}")
            if i.freed_at:
                parts.append(f"  and freed at:\n{i.freed_at}")
        if len(dead) > 5:
            parts.append(f"  ... and {len(dead) - 5} more\n")
        raise RuntimeError("".join(parts))


def _in_pool(i: _Input, pool) -> bool:
    return any(s["device"] == i.device.index and s["address"] <= i.address < s["address"] + s["total_size"]
               for s in torch.openreg.memory_snapshot(pool))
