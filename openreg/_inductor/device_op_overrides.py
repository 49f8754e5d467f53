"""The snippets Inductor's wrapper writes for openreg device calls.

Fills ``torch._inductor.codegen.common.register_device_op_overrides``: how
generated code sets the device, synchronises, guards a device and gets a raw
stream (openreg's kernels run on the current stream, so nothing takes one).
"""

from textwrap import dedent

from torch._inductor.codegen.common import DeviceOpOverrides


class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return dedent(
            f"""
            def {name}(device_index):
                return torch.openreg.current_stream(device_index).stream_id
            """
        )

    def set_device(self, device_idx: int) -> str:
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.openreg.device({device_idx})"
