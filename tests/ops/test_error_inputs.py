"""Bad inputs raise the CPU's exception on openreg, on the host.

OpInfo's error_inputs (the invalid calls PyTorch's own test_errors uses): for
each one that raises on the CPU, openreg must raise the same exception type
with a message matching the OpInfo's regex, synchronously, and leave the
stream usable. One test per op; known gaps, per error input, are in
expected_failures.ERROR_INPUTS (must still fail); the ones whose error
arrives asynchronously (a CPU-kernel check the Meta kernel lacks,
so the error is raised inside the kernel and the stream stays failed, like a
CUDA device-side assert) are listed but not run, since they would fail every
later test in the worker.
"""
import itertools
import re

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from common import DEVICE
from expected_failures import ERROR_INPUTS, ERROR_INPUTS_ASYNC

MAX_ERROR_INPUTS = 50


def op_id(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def call(op, error_input):
    s = error_input.sample_input
    return op(s.input, *s.args, **s.kwargs)


def check(op, error_input, cpu_input):
    """None if checked, or why the error input does not apply."""
    if cpu_input is None:
        return "no CPU counterpart for this device-specific error input"
    try:
        call(op, cpu_input)
    except Exception:
        pass
    else:
        return "accepted by the CPU too (it targets another device)"
    with pytest.raises(error_input.error_type) as info:
        call(op, error_input)
    assert re.search(error_input.error_regex, str(info.value)), str(info.value)
    torch.openreg.synchronize()  # raised on the host: nothing failed on a stream
    return None


@pytest.mark.parametrize("op", [op for op in op_db if op.error_inputs_func is not None], ids=op_id)
def test_error_inputs(op, record_property):
    # Error inputs are device-specific: some exist only for the CPU.
    inputs = list(itertools.islice(op.error_inputs(DEVICE), MAX_ERROR_INPUTS))
    cpu_inputs = list(itertools.islice(op.error_inputs("cpu"), MAX_ERROR_INPUTS))
    problems = []
    passed = total = 0
    for index, error_input in enumerate(inputs):
        key = f"{op_id(op)}[{index}]"
        cpu_input = cpu_inputs[index] if index < len(cpu_inputs) else None
        if key in ERROR_INPUTS_ASYNC:
            total += 1  # listed; running it would leave this worker's stream failed
            continue
        try:
            if check(op, error_input, cpu_input) is not None:
                continue  # does not apply: not counted
            passed += 1
            if key in ERROR_INPUTS:
                problems.append(f"{key} passes now: remove it from ERROR_INPUTS")
        except (Exception, pytest.fail.Exception) as e:  # collected, reported below
            if key not in ERROR_INPUTS:
                problems.append(f"{key}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        total += 1
    record_property("error_inputs", (passed, total))  # summed in conftest.py
    assert not problems, "\n".join(problems)


# Checks that CPU kernels make inside the kernel body (not in the Meta kernel
# or the dtype dispatch): openreg probes them on the host (DispatchProbe.h,
# Fallback.cpp), so they raise at the call, with the CPU's exception, and the
# stream stays usable.
def _topk_into_its_input(dev):
    x = torch.randn(5, device=dev)
    return torch.topk(x, 2, out=(x[:2], torch.empty(2, dtype=torch.long, device=dev)))


def _index_put_from_itself(dev):
    x = torch.randn(5, device=dev)
    return x.index_put_((torch.tensor([0, 1], device=dev),), x[1:3])


def _int8(dev):
    return torch.ones(3, dtype=torch.int8, device=dev)


def _f32(dev):
    return torch.ones(3, 3, device=dev)


KERNEL_CHECKS = {
    "var of ints": lambda dev: torch.arange(4, device=dev).var(),
    "std of ints": lambda dev: torch.arange(4, device=dev).std(dim=0),
    "min of empty": lambda dev: torch.empty(0, device=dev).min(),
    "mode of empty": lambda dev: torch.empty(0, device=dev).mode(),
    "alpha overflowing int8": lambda dev: _int8(dev).add(_int8(dev), alpha=1000),
    "float alpha for ints": lambda dev: _int8(dev).sub(_int8(dev), alpha=0.5),
    # A Scalar argument that the op's dtype cannot hold: the CPU converts it
    # inside the kernel ("value cannot be converted to type float without
    # overflow"), which depends on the Scalar and the dtype only.
    "complex alpha for float addmm": lambda dev: torch.addmm(_f32(dev), _f32(dev), _f32(dev), alpha=1j),
    "complex value for addcmul_": lambda dev: _f32(dev).addcmul_(_f32(dev), _f32(dev), value=1j),
    "complex lerp weight": lambda dev: torch.lerp(_f32(dev), _f32(dev), 1j),
    "complex scatter_ value": lambda dev: _f32(dev).scatter_(0, torch.zeros(1, 3, dtype=torch.long, device=dev), 1j),
    "complex index_fill_ value": lambda dev: _f32(dev).index_fill_(0, torch.tensor([0], device=dev), 1j),
    "int8 masked_fill 300": lambda dev: _int8(dev).masked_fill(_int8(dev) > 0, 300),
    "int8 index_fill 300": lambda dev: _int8(dev).index_fill(0, torch.tensor([0], device=dev), 300),
    "index_select of a 0-dim tensor with 2 indices":
        lambda dev: torch.index_select(torch.tensor(3.0, device=dev), 0, torch.tensor([0, 0], device=dev)),
    "dilation 0": lambda dev: torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device=dev),
                                                         torch.ones(1, 1, 2, 2, device=dev), dilation=0),
    "non-positive stride": lambda dev: torch.nn.functional.conv1d(torch.ones(1, 1, 4, device=dev),
                                                                  torch.ones(1, 1, 2, device=dev), stride=0),
    "topk into its input": _topk_into_its_input,
    "index_put_ from itself": _index_put_from_itself,
}


@pytest.mark.parametrize("case", KERNEL_CHECKS)
def test_cpu_kernel_checks_raise_at_the_call(case):
    fn = KERNEL_CHECKS[case]
    with pytest.raises(Exception) as on_cpu:
        fn("cpu")
    with pytest.raises(type(on_cpu.value)) as on_openreg:
        fn(DEVICE)
    assert str(on_openreg.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    torch.openreg.synchronize()  # raised on the host: nothing failed on a stream


def test_probes_reject_no_valid_call():
    # The probes fill tensors with zeros and ones: an error over those values
    # (integer division by zero) is not taken for the kernel's dtype check,
    # and a verdict over one Scalar value is not kept for another.
    a = torch.tensor([7, -9, 4], device=DEVICE)
    b = torch.tensor([2, 4, -3], device=DEVICE)
    for op in (torch.floor_divide, torch.remainder, torch.fmod):
        assert torch.equal(op(a, b).cpu(), op(a.cpu(), b.cpu())), op
    assert torch.equal(torch.div(a, b, rounding_mode="trunc").cpu(),
                       torch.div(a.cpu(), b.cpu(), rounding_mode="trunc"))
    with pytest.raises(RuntimeError, match="without overflow"):
        _int8(DEVICE).add(_int8(DEVICE), alpha=1000)
    assert torch.equal(_int8(DEVICE).add(_int8(DEVICE), alpha=100).cpu(), torch.full((3,), 101, dtype=torch.int8))
    assert torch.equal(torch.empty(0, 3, device=DEVICE).amax(dim=1).cpu(), torch.empty(0))
    torch.openreg.synchronize()


@pytest.mark.parametrize("call", [
    lambda x: x // 0, lambda x: x % 0, lambda x: torch.fmod(x, 0),
    lambda x: torch.div(x, 0, rounding_mode="trunc"), lambda x: x.floor_divide_(0),
    lambda x: x // torch.tensor(0), lambda x: torch.remainder(x, 0, out=torch.empty_like(x)),
])
def test_integer_division_by_a_host_zero_raises_at_the_call(call):
    # As the CPU kernel: ZeroDivisionError at the call, and the stream stays
    # usable (queued, the error would fail it for good).
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(torch.tensor([7, 8]))
    x = torch.tensor([7, 8], device=DEVICE)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(x)
    assert (x // 2).cpu().tolist() == [3, 4]
    assert torch.div(x, 0).cpu().tolist() == [float("inf")] * 2  # true division: no error


def test_cpu_op_with_an_openreg_generator_gets_cudas_message():
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'openreg'"):
        torch.randn(3, generator=torch.Generator(DEVICE))
