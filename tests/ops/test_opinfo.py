"""PyTorch's OpInfo database run on openreg and compared with the CPU.

For every OpInfo in `op_db` and each of float32, bfloat16, int64 and bool that
the op supports on the CPU, the first MAX_SAMPLES sample inputs run on the CPU
and on openreg (copies of the same tensors); results must match
(torch.testing.assert_close with the dtype's default tolerances, NaNs equal)
and come back on openreg. Samples are built on openreg (as CUDA's OpInfo tests
build them on CUDA); the CPU gets copies. For float32 and differentiable ops, the gradients of
the outputs (against one fixed random cotangent) must match too, so backward
kernels are covered as well.

Random operators are seeded identically before each run (torch.manual_seed
seeds the openreg generators too): openreg must reproduce the CPU's numbers.
Ops that return uninitialised memory (empty*) are compared on metadata only.

Expected failures come from expected_failures.OPINFO (strict xfail: a fixed
entry fails until it is removed). The per-sample totals are printed at the end
of the run by conftest.py ("OpInfo samples: passed/total").
"""
import itertools

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten

from common import DEVICE, assert_same, to_device
from expected_failures import OPINFO

MAX_SAMPLES = 5
DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool)
# Results are uninitialised memory: only shape, dtype and device are compared.
UNINITIALISED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                 "empty_permuted"}
SEED = 1234


def op_id(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def params():
    for op in op_db:
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            key = f"{op_id(op)}@{dtype_name(dtype)}"
            reason = OPINFO.get(key) or OPINFO.get(op_id(op))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(op, dtype, id=key, marks=marks)


def run(op, sample, device):
    """Runs `sample` (built on openreg) on `device`: for the CPU, openreg
    tensors are copied and device arguments renamed; tensors the sample keeps
    on the CPU on purpose (tensor_split's indices, ...) stay there."""
    args, kwargs = (sample.input, *sample.args), sample.kwargs
    if device == "cpu":
        args, kwargs = to_device((args, kwargs), "cpu", source=DEVICE)
    torch.manual_seed(SEED)
    return op(*args, **kwargs), args, kwargs


def differentiable_leaves(args, kwargs):
    leaves = tree_flatten((args, kwargs))[0]
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def gradients(sample, result, args, kwargs):
    """Gradients of <outputs, cotangent> w.r.t. the differentiable inputs."""
    outputs = sample.output_process_fn_grad(result)
    outputs = [t for t in tree_flatten(outputs)[0]
               if isinstance(t, torch.Tensor) and t.requires_grad]
    inputs = differentiable_leaves(args, kwargs)
    if not outputs or not inputs:
        return None
    gen = torch.Generator().manual_seed(0)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device)
                  for o in outputs]
    return torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)


def check_sample(op, dtype, sample, with_grad):
    try:
        expected, cpu_args, cpu_kwargs = run(op, sample, "cpu")
    except Exception:
        return False  # not a valid sample on the CPU either: not counted
    actual, dev_args, dev_kwargs = run(op, sample, DEVICE)
    if op.name in UNINITIALISED:
        assert actual.device.type == DEVICE
        assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype)
        return True
    assert_same(actual, expected)
    if with_grad:
        try:
            expected_grads = gradients(sample, expected, cpu_args, cpu_kwargs)
        except Exception:
            return True  # no backward on the CPU for this sample
        actual_grads = gradients(sample, actual, dev_args, dev_kwargs)
        assert_same(actual_grads, expected_grads)
    return True


@pytest.mark.parametrize("op,dtype", list(params()))
def test_opinfo(op, dtype, record_property):
    with_grad = dtype == torch.float32 and op.supports_autograd
    torch.manual_seed(0)  # sample inputs are random: make them reproducible
    # Samples are built on openreg, as CUDA's OpInfo tests build them on CUDA.
    samples = op.sample_inputs(DEVICE, dtype, requires_grad=with_grad)
    passed = total = 0
    failures = []
    # Every sample runs even after a failure, so the totals are exact.
    for index, sample in enumerate(itertools.islice(samples, MAX_SAMPLES)):
        try:
            if not check_sample(op, dtype, sample, with_grad):
                continue
            passed += 1
        except Exception as e:  # noqa: BLE001 (reported below with the sample)
            failures.append((index, sample, e))
        total += 1
    torch.openreg.synchronize()  # surface asynchronous kernel errors here
    record_property("opinfo_samples", (passed, total))  # summed in conftest.py
    if failures:
        index, sample, error = failures[0]
        message = " ".join(str(error).split())[:400]
        raise AssertionError(f"{len(failures)}/{total} samples failed; first (sample {index}): "
                             f"{type(error).__name__}: {message}") from error
