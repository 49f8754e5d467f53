"""Dynamo's device interface for openreg (``torch._dynamo.device_interface``).

What Dynamo and Inductor ask a device through ``get_interface_for_device``:
its current device and stream, device properties (Inductor sizes reductions
by ``multi_processor_count``), synchronisation, and the Stream / Event classes
Dynamo traces: torch.openreg's functions, and a few small adapters where the
interface's signature differs (exchange_device, _set_stream_by_id, get_raw_stream).
Registered for "openreg" and "openreg:N" (as CUDA's are) when ``torch._dynamo``
is first imported (openreg/_registration.py), so Dynamo sees openreg from its
first trace, not only after Inductor's first compile.
"""

from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
    register_interface_for_device,
)

import openreg


class OpenRegInterface(DeviceInterface):
    device = openreg.device
    Event = openreg.Event
    Stream = openreg.Stream

    class Worker:
        """Answers from values recorded in the main process (compile workers
        are forked and must not touch the device)."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices["openreg"] = device

        @staticmethod
        def current_device() -> int:
            if "openreg" in caching_worker_current_devices:
                return caching_worker_current_devices["openreg"]
            return openreg.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if isinstance(device, (str, torch.device)):
                device = torch.device(device).index
            if device is None:
                device = OpenRegInterface.Worker.current_device()
            if "openreg" not in caching_worker_device_properties:
                caching_worker_device_properties["openreg"] = [
                    openreg.get_device_properties(i) for i in range(openreg.device_count())
                ]
            properties = caching_worker_device_properties["openreg"]
            if not 0 <= device < len(properties):
                raise AssertionError("Invalid device id")  # get_device_properties' words
            return properties[device]

    current_device = staticmethod(openreg.current_device)
    set_device = staticmethod(openreg.set_device)
    device_count = staticmethod(openreg.device_count)
    stream = staticmethod(openreg.stream)
    current_stream = staticmethod(openreg.current_stream)
    set_stream = staticmethod(openreg.set_stream)
    synchronize = staticmethod(openreg.synchronize)
    get_device_properties = staticmethod(openreg.get_device_properties)
    memory_allocated = staticmethod(openreg.memory_allocated)
    is_bf16_supported = staticmethod(openreg.is_bf16_supported)
    is_available = staticmethod(openreg.is_available)

    @staticmethod
    def exchange_device(device: int) -> int:
        if device < 0:
            return -1  # a no-op that initialises nothing, as torch.cuda._exchange_device(-1)
        openreg._lazy_init()
        return openreg._C._exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return OpenRegInterface.exchange_device(device) if device >= 0 else -1

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        openreg.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                        device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return openreg.current_stream(device_idx).stream_id

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        return ""


def register() -> None:
    register_interface_for_device("openreg", OpenRegInterface)
    for i in range(openreg.device_count()):
        register_interface_for_device(f"openreg:{i}", OpenRegInterface)
