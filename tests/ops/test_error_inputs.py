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
