"""PyTorch's OpInfo database run on openreg and compared with the CPU.

For every OpInfo in `op_db` and each of float32, bfloat16, int64 and bool that
the op supports on the CPU, the first MAX_SAMPLES sample inputs run on the CPU
and on openreg (copies of the same tensors); results must match
(torch.testing.assert_close with the dtype's default tolerances, NaNs equal)
and come back on openreg. On the first sample, the in-place variant (must
write its input and return it) and the out= variant (an empty `out` must be
resized like the CPU's) are checked too. Samples are built on openreg (as CUDA's OpInfo tests
build them on CUDA); the CPU gets copies. For float32 and differentiable ops, the gradients of
the outputs (against one fixed random cotangent) must match too, so backward
kernels are covered as well.

Random operators are seeded identically before each run (torch.manual_seed
seeds the openreg generators too): a sample's random op is the first draw
after the seed, which openreg makes with the CPU's own generator for that seed,
so it must reproduce the CPU's numbers.
Ops that return uninitialised memory (empty*) are compared on metadata only.

Expected failures come from expected_failures.OPINFO (strict xfail: a fixed
entry fails until it is removed). The per-sample totals are printed at the end
of the run by conftest.py ("OpInfo samples: passed/total").
"""
import itertools

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

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


def fresh_copies(sample):
    """Independent (cpu, openreg) copies of a sample's (args, kwargs), without
    autograd, for variants that write into their arguments."""
    args = tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t,
                    ((sample.input, *sample.args), sample.kwargs))
    cpu = to_device(args, "cpu", source=DEVICE)
    dev = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) and t.device.type == DEVICE
                   else t, args)
    return cpu, dev


def check_inplace(op, sample):
    """The in-place variant writes the CPU's values into its openreg input and
    returns that very tensor. False if the CPU rejects it (dtype promotion)."""
    (cpu_args, cpu_kwargs), (dev_args, dev_kwargs) = fresh_copies(sample)
    torch.manual_seed(SEED)
    try:
        op.inplace_variant(*cpu_args, **cpu_kwargs)
    except Exception:
        return False
    torch.manual_seed(SEED)
    result = op.inplace_variant(*dev_args, **dev_kwargs)
    assert result is dev_args[0], "in-place variant did not return its input"
    assert_same(dev_args[0], cpu_args[0])
    return True


def check_out(op, sample):
    """out= with an empty tensor: resized like the CPU's and returned."""
    (cpu_args, cpu_kwargs), (dev_args, dev_kwargs) = fresh_copies(sample)
    torch.manual_seed(SEED)
    try:
        expected = op(*cpu_args, **cpu_kwargs)
        if not isinstance(expected, torch.Tensor):
            return False
        cpu_out = torch.empty(0, dtype=expected.dtype)
        torch.manual_seed(SEED)
        op(*cpu_args, **cpu_kwargs, out=cpu_out)
    except Exception:
        return False
    dev_out = torch.empty(0, dtype=expected.dtype, device=DEVICE)
    torch.manual_seed(SEED)
    result = op(*dev_args, **dev_kwargs, out=dev_out)
    assert result is dev_out, "out= variant did not return `out`"
    assert_same(dev_out, cpu_out)
    return True


def checks(op, dtype, samples, with_grad):
    """(name, thunk) for every check of one op/dtype: each sample, and the
    in-place and out= variants on the first sample."""
    for index, sample in enumerate(itertools.islice(samples, MAX_SAMPLES)):
        yield f"sample {index}", lambda s=sample: check_sample(op, dtype, s, with_grad)
        if index == 0 and op.name not in UNINITIALISED:
            if op.inplace_variant is not None:
                yield "in-place variant", lambda s=sample: check_inplace(op, s)
            if op.supports_out:
                yield "out= variant", lambda s=sample: check_out(op, s)


@pytest.mark.parametrize("op,dtype", list(params()))
def test_opinfo(op, dtype, record_property):
    with_grad = dtype == torch.float32 and op.supports_autograd
    torch.manual_seed(0)  # sample inputs are random: make them reproducible
    # Samples are built on openreg, as CUDA's OpInfo tests build them on CUDA.
    samples = op.sample_inputs(DEVICE, dtype, requires_grad=with_grad)
    passed = total = 0
    failures = []
    # Every check runs even after a failure, so the totals are exact.
    for name, check in checks(op, dtype, samples, with_grad):
        try:
            if not check():
                continue  # invalid on the CPU too: not counted
            passed += 1
        except Exception as e:  # noqa: BLE001 (reported below with the check)
            failures.append((name, e))
        total += 1
    torch.openreg.synchronize()  # surface asynchronous kernel errors here
    record_property("opinfo_samples", (passed, total))  # summed in conftest.py
    if failures:
        name, error = failures[0]
        message = " ".join(str(error).split())[:400]
        raise AssertionError(f"{len(failures)}/{total} checks failed; first ({name}): "
                             f"{type(error).__name__}: {message}") from error
