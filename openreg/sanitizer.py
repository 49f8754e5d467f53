"""The race checker: ``torch.openreg.sanitizer`` (what ``torch.cuda._sanitizer`` is for CUDA).

Kernels on different streams of a real accelerator that touch the same memory
without an event or stream wait in between race: the result depends on timing,
and a test on one machine may pass by luck. With the checker on, every launch
is checked against the earlier work of other streams (and of oreg_ccl's
collectives, which run off the stream until ``Work.wait()``), in happens-before
order, and the launch that races raises ``RuntimeError`` at its call, naming
both sides. It follows the memory, not the tensor: a tensor freed while
another stream still used it and reused by the allocator (a missing
``Tensor.record_stream``) is reported at the reusing kernel.

On for a whole run (every process torchrun starts inherits it)::

    OPENREG_SANITIZER=1 openreg-run

or in code: ``torch.openreg.sanitizer.enable()``. Off by default: it costs a
lock and a map lookup per launch. Implemented in csrc/runtime/driver/Sanitizer.cpp;
tests: tests/runtime/test_sanitizer.py, tests/distributed/test_sanitizer_ccl.py.
"""
import contextlib

from . import _C


def enable() -> None:
    """Checks every later launch; history from before is forgotten."""
    _C._sanitizer_enable(True)


def disable() -> None:
    _C._sanitizer_enable(False)


def is_enabled() -> bool:
    return _C._sanitizer_enabled()


@contextlib.contextmanager
def enabled():
    """Checks the launches of a ``with`` block (and restores the previous setting)."""
    before = is_enabled()
    enable()
    try:
        yield
    finally:
        if not before:
            disable()
