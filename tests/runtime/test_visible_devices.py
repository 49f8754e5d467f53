"""OPENREG_VISIBLE_DEVICES: which of the OPENREG_DEVICE_COUNT simulated devices
a process sees, and in which order, read as torch reads CUDA_VISIBLE_DEVICES
(csrc/runtime/driver/Device.cpp)."""
import os
import textwrap

import pytest


def _visible(python, value, count="4", code="print(torch.openreg.device_count())"):
    env = {"OPENREG_DEVICE_COUNT": count}
    if value is not None:
        env["OPENREG_VISIBLE_DEVICES"] = value
    r = python("import torch, openreg\n" + code, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("value,count", [
    (None, "4"),        # unset: every device
    ("2,0", "2"),
    (" +1 , 3", "2"),   # each entry's leading integer, blanks around it ignored
    ("1,x,2", "1"),     # the list ends at the first entry that is not a number...
    ("1,-1,2", "1"),    # ...or is negative...
    ("0,4,1", "1"),     # ...or names no device (OPENREG_DEVICE_COUNT=4)
    ("1,2,1", "0"),     # an index given twice: no devices, as CUDA
    ("0,9,0", "0"),     # (checked before the list ends at a device that does not exist)
    ("003,-0", "2"),    # leading zeros; "-0" is 0, as strtoul reads it
    ("\n1", "1"),      # any blank
    ("", "0"),
])
def test_visible_devices_are_parsed_as_cuda_visible_devices(python, value, count):
    assert _visible(python, value) == count


def test_a_visible_device_keeps_its_physical_identity(python):
    # openreg:0 is physical device 2: its properties name that device, and its
    # uuid is physical device 2's wherever it is visible.
    out = _visible(python, "2,0", code="""
        p = torch.openreg.get_device_properties
        print(p(0).name, "|", p(1).name, "|", p(0).pci_bus_id)
        print(p(0).uuid)
        x = torch.ones(3, device="openreg:1") + 1
        print(x.cpu().tolist())
    """.replace("\n        ", "\n"))
    name0, name1, bus = out.splitlines()[0].split(" | ")
    assert (name0, name1, bus) == ("openreg simulated device 2", "openreg simulated device 0", "2")
    uuid_of_2 = _visible(python, None, code="print(torch.openreg.get_device_properties(2).uuid)")
    assert out.splitlines()[1] == uuid_of_2
    assert out.splitlines()[2] == "[2.0, 2.0, 2.0]"


def test_no_visible_device_is_not_available(python):
    out = _visible(python, "", code="""
        print(torch.openreg.is_available())
        try:
            torch.ones(1, device="openreg")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
    """.replace("\n        ", "\n"))
    assert out.splitlines() == [
        "False",
        "openreg error: no openreg devices are available (OPENREG_VISIBLE_DEVICES lists none)"]


def test_an_index_beyond_the_visible_devices_names_the_knob(python):
    out = _visible(python, "3", code="""
        try:
            torch.ones(1, device="openreg:1")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
    """.replace("\n        ", "\n"))
    assert out == ("openreg error: invalid device ordinal: openreg:1 requested, but only 1 openreg "
                   "devices exist (valid indices are 0..0; OPENREG_VISIBLE_DEVICES shows only these)")
