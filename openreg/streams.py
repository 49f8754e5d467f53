"""Streams and events (the torch.cuda stream API, for openreg).

``Stream`` and ``Event`` are ``torch.Stream`` / ``torch.Event`` for device type
"openreg"; their methods reach the DeviceGuardImpl in csrc/runtime.
Tests: tests/runtime/test_streams.py.
"""
from typing import Optional

import torch

from . import _C
from .device import _get_device_index, _lazy_init, is_initialized

_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as torch.Stream.device_type reports it


class Stream(torch.Stream):
    """An in-order queue of work on an openreg device, run by its own worker.

    ``priority`` < 0 selects the high-priority pool, as ``torch.cuda.Stream``.
    """

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        _lazy_init()
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        index = _get_device_index(device)
        return super().__new__(cls, device=torch.device("openreg", index), priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.stream_id, self.device_index)

    @staticmethod
    def priority_range():
        """(lowest, highest) priority, as ``torch.cuda.Stream.priority_range()``."""
        return (0, -1)

    def record_event(self, event: Optional[torch.Event] = None) -> torch.Event:
        """Records ``event`` (a new ``Event`` if None) on this stream and returns it.
        As torch.cuda's, in Python: torch.Stream.record_event accepts only an
        exact torch.Event, not this module's Event."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch.openreg.Stream device=openreg:{self.device_index} id={self.stream_id}>"


class Event(torch.Event):
    """A marker in a stream; ``enable_timing=True`` allows ``elapsed_time``.

    ``interprocess=True`` (no timing, as CUDA's) makes an event of the current
    device that other processes open with ``Event.from_ipc_handle(device,
    event.ipc_handle())`` (or receive through torch.multiprocessing): a record
    in any of them is what the others' ``wait``, ``query`` and ``synchronize``
    see (csrc/runtime/OpenRegIpcEvent.h).
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess and enable_timing:
            # CUDA refuses cudaEventInterprocess without cudaEventDisableTiming.
            raise RuntimeError("openreg: an event cannot be both interprocess and timing "
                               "(use enable_timing=False with interprocess=True)")
        event = super().__new__(cls, device="openreg", enable_timing=enable_timing, blocking=blocking)
        if interprocess:
            _lazy_init()
            _C._event_make_interprocess(event, _C._current_device())
        return event

    @classmethod
    def from_ipc_handle(cls, device, handle: bytes) -> "Event":
        """The interprocess event another process's ``ipc_handle()`` returned, used on ``device``."""
        _lazy_init()
        event = super().__new__(cls, device="openreg")
        _C._event_open_interprocess(event, _get_device_index(device), handle)
        return event

    def ipc_handle(self) -> bytes:
        """The bytes another process passes to ``Event.from_ipc_handle`` (interprocess events only)."""
        return _C._event_ipc_handle(self)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded and complete)."""
        if not isinstance(end_event, torch.Event):  # a TypeError, as torch.cuda's binding raises
            raise TypeError(f"elapsed_time(): expected a torch.Event, got {type(end_event).__name__}")
        return _C._event_elapsed_time(self, end_event)


def _wrap(stream_id: int, device_index: int) -> Stream:
    return Stream(stream_id=stream_id, device_index=device_index, device_type=_PRIVATEUSE1)


def current_stream(device=None) -> Stream:
    _lazy_init()
    return _wrap(*_C._current_stream(_get_device_index(device)))


def default_stream(device=None) -> Stream:
    _lazy_init()
    return _wrap(*_C._default_stream(_get_device_index(device)))


def _check_openreg_stream(stream: torch.Stream) -> None:
    # Before its device index (-1 for a CPU stream) is used.
    if stream.device_type != _PRIVATEUSE1:
        raise RuntimeError(f"Expected an openreg stream, got a stream of device {stream.device}")


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    _check_openreg_stream(stream)
    # The stream's device becomes the current device too, as torch.cuda.set_stream.
    if stream.device_index != _C._current_device():
        _C._set_device(stream.device_index)
    _C._set_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Selects a stream (and its device) for the duration of a ``with`` block."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.src_prev = None
        self.dst_prev = None
        self.prev_device = None

    def __enter__(self):
        if self.stream is None:
            return
        _check_openreg_stream(self.stream)
        _lazy_init()
        self.prev_device = _C._current_device()
        self.src_prev = current_stream(self.prev_device)
        if self.stream.device_index != self.prev_device:
            _C._set_device(self.stream.device_index)
            self.dst_prev = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *args):
        if self.stream is None:
            return False
        if self.dst_prev is not None:
            set_stream(self.dst_prev)
        set_stream(self.src_prev)
        _C._set_device(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)


def is_current_stream_capturing() -> bool:
    """True while a graph (torch.accelerator.Graph) captures on the current
    stream of the current device, as torch.cuda's: libraries ask this before
    calls that capture forbids."""
    if not is_initialized():
        return False
    return current_stream().is_capturing()  # the DeviceGuardImpl's isStreamCapturing


def _sleep(milliseconds: float) -> None:
    """Queues a kernel that keeps the current stream busy (like torch.cuda._sleep)."""
    _lazy_init()
    _C._sleep(float(milliseconds))
