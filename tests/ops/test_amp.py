"""AMP on openreg: CUDA's autocast policy, GradScaler, autocast dtype API.

The op lists and the checking helper are PyTorch's own
(torch.testing._internal.autocast_test_lists, the ones test_cuda.py runs for
CUDA): each op runs under torch.autocast("openreg") and must produce the
dtype CUDA's policy prescribes, bitwise equal to running it on inputs cast by
hand with autocast disabled (test_cuda.py's _run_autocast_outofplace check).
Lists run with float16 and bfloat16, except the promote lists (float16, as
test_cuda.py runs them).
"""
import pytest
import torch
from torch.testing._internal.autocast_test_lists import AutocastTestLists

from expected_failures import AMP

DEVICE = "openreg"
LISTS = AutocastTestLists(torch.device(DEVICE))
LOW = {"fp16": torch.float16, "bf16": torch.bfloat16}

# list name -> (module the op lives in, run_as_type; None: the autocast dtype)
CASES = {
    "torch_fp16": (torch, None),
    "torch_fp32": (torch, torch.float32),
    "torch_need_autocast_promote": (torch, torch.float32),
    "torch_expect_builtin_promote": (torch, torch.float32),
    "methods_expect_builtin_promote": (None, torch.float32),
    "nn_fp16": (torch._C._nn, None),
    "nn_fp32": (torch._C._nn, torch.float32),
    "linalg_fp16": (torch._C._linalg, None),
    "methods_fp16": (None, None),
    "methods_fp32": (None, torch.float32),
}


# test_cuda.py runs the promote lists with float16 only: at::autocast::prioritize
# rejects their float16 inputs under a bfloat16 autocast (on CUDA as well).
FP16_ONLY = {"torch_need_autocast_promote", "torch_expect_builtin_promote",
             "methods_expect_builtin_promote"}


def params():
    for name in CASES:
        for index, entry in enumerate(getattr(LISTS, name)):
            for low in LOW:
                if low == "bf16" and name in FP16_ONLY:
                    continue
                reason = AMP.get(f"{entry[0]}@{name}")
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                yield pytest.param(name, index, low, id=f"{name}-{entry[0]}-{index}-{low}",
                                   marks=marks)


def cast(value, dtype):
    """Floating tensors (also inside tuples/lists) to `dtype`; the rest as is."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(cast(v, dtype) for v in value)
    return value


def same(a, b):
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("name,index,low", list(params()))
def test_autocast_policy(name, index, low):
    """The op's result under autocast has the policy's dtype and equals the op
    run on inputs cast by hand with autocast off (bitwise), as test_cuda.py's
    _run_autocast_outofplace checks for CUDA."""
    module, run_as = CASES[name]
    entry = getattr(LISTS, name)[index]
    op, args = entry[0], entry[1]
    if isinstance(args, str):  # einsum's entry: (op, equation, operands)
        args = (args, *entry[2])
    run_as = run_as or LOW[low]
    out_type = entry[2] if name in FP16_ONLY and len(entry) > 2 else run_as
    call = (lambda *a: getattr(module, op)(*a)) if module is not None and hasattr(module, op) \
        else (lambda first, *rest: getattr(first, op)(*rest))
    with torch.autocast(DEVICE, dtype=LOW[low]):
        result = call(*args)
        if isinstance(result, torch.Tensor):
            assert result.dtype == out_type, f"{op} gave {result.dtype}, policy says {out_type}"
            assert result.device.type == DEVICE
        with torch.autocast(DEVICE, enabled=False):
            control = call(*cast(args, run_as))
    assert same(result, control), f"{op} under autocast differs from casting by hand"


@pytest.mark.parametrize("index", range(len(LISTS.banned)))
def test_autocast_banned(index):
    op, args, module = LISTS.banned[index]
    with torch.autocast(DEVICE, dtype=torch.float16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            getattr(module, op)(*args)


def test_autocast_dtype_api():
    assert torch.get_autocast_dtype(DEVICE) == torch.float16  # CUDA's default
    assert torch.amp.is_autocast_available(DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        assert torch.is_autocast_enabled(DEVICE)
        assert torch.get_autocast_dtype(DEVICE) == torch.bfloat16
        x = torch.randn(4, 4, device=DEVICE)
        assert (x @ x).dtype == torch.bfloat16
        assert torch.softmax(x, 0).dtype == torch.float32
    assert not torch.is_autocast_enabled(DEVICE)
    # As on CUDA: an unsupported dtype warns and disables autocast.
    with pytest.warns(UserWarning, match="openreg autocast, but the target dtype is not supported"):
        with torch.autocast(DEVICE, dtype=torch.float64):
            assert not torch.is_autocast_enabled(DEVICE)


def _model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return model.to(DEVICE), torch.randn(4, 8, device=DEVICE), torch.randint(0, 3, (4,), device=DEVICE)


@pytest.mark.parametrize("low", LOW)
def test_grad_scaler_trains(low):
    model, x, y = _model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(DEVICE, init_scale=2.0 ** 10)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        with torch.autocast(DEVICE, dtype=LOW[low]):
            out = model(x)
            assert out.dtype == LOW[low]
            loss = torch.nn.functional.cross_entropy(out, y)
        assert loss.dtype == torch.float32  # cross_entropy is on the fp32 list
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert scaler.get_scale() == 2.0 ** 10  # no overflow: scale unchanged (growth every 2000)


def test_grad_scaler_unscales_and_skips_inf_steps():
    model, x, y = _model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(DEVICE, init_scale=4.0, growth_interval=1)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaled = [p.grad.clone() for p in model.parameters()]
    scaler.unscale_(opt)
    for p, g in zip(model.parameters(), scaled):
        torch.testing.assert_close(p.grad.cpu(), g.cpu() / 4.0)
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 8.0  # finite step: grows (growth_interval=1)
    assert any(not torch.equal(b.cpu(), p.detach().cpu()) for b, p in zip(before, model.parameters()))

    # An inf gradient: the step is skipped and the scale backs off.
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 4.0
    for b, p in zip(before, model.parameters()):
        assert torch.equal(b.cpu(), p.detach().cpu())


def test_amp_kernels_match_cpu():
    # The two GradScaler kernels give the CPU's results on the same inputs.
    grads = [torch.tensor([1.0, 2.0, float("nan")]), torch.tensor([4.0, -8.0])]
    results = {}
    for device in ("cpu", DEVICE):
        g = [t.clone().to(device) for t in grads]
        found = torch.zeros(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(g, found, torch.full((1,), 0.5, device=device))
        scale = torch.full((1,), 8.0, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3)
        results[device] = [t.cpu() for t in g] + [found.cpu(), scale.cpu(), tracker.cpu()]
    torch.testing.assert_close(results[DEVICE], results["cpu"], equal_nan=True)
    assert results[DEVICE][2].item() == 1.0 and results[DEVICE][3].item() == 4.0


def test_cuda_amp_style_aliases_autocast_scale_and_cast_on_openreg():
    # torch.cuda.amp's deprecated names, for scripts ported from CUDA: the same
    # behaviour as torch.amp's with device "openreg", and CUDA's FutureWarning.
    lin = torch.nn.Linear(4, 4).to("openreg")
    x = torch.randn(2, 4, device="openreg")
    with pytest.warns(FutureWarning, match=r"torch.amp.autocast\('openreg'"):
        ctx = torch.openreg.amp.autocast(dtype=torch.bfloat16)
    with ctx:
        y = lin(x)
    assert y.dtype == torch.bfloat16
    with pytest.warns(FutureWarning, match="GradScaler"):
        scaler = torch.openreg.amp.GradScaler(init_scale=8.0)
    assert scaler.scale(torch.ones(1, device="openreg")).item() == 8.0

    with pytest.warns(FutureWarning):
        class Double(torch.autograd.Function):
            @staticmethod
            @torch.openreg.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, a):
                return a * 2

            @staticmethod
            @torch.openreg.amp.custom_bwd
            def backward(ctx, g):
                return g * 2

    a = torch.ones(2, device="openreg", dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("openreg", dtype=torch.bfloat16):
        out = Double.apply(a)
    assert out.dtype == torch.float32  # cast_inputs: run in float32 under autocast
    out.sum().backward()
    assert a.grad.tolist() == [2.0, 2.0]
