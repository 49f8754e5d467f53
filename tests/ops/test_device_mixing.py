"""Tensors on different devices in one op raise CUDA's error.

CUDA's rule: all tensors of an op on one device, except 0-dim CPU tensors
(treated as scalars) and a few ops that take host tensors on purpose
(indices for advanced indexing). The check happens on the host, before any
kernel is queued, so the device stays usable afterwards.
"""
import pytest
import torch

SAME_DEVICE = "Expected all tensors to be on the same device"
# Some ATen ops check devices themselves, with their own wording (as on CUDA).
OWN_CHECK = {"index_add": "expected to be in the same device"}

BINARY_OPS = {
    "add": lambda x, y: x + y,
    "mul_": lambda x, y: x.mul_(y),
    "mm": lambda x, y: torch.mm(x, y),
    "matmul": lambda x, y: x @ y,
    "cat": lambda x, y: torch.cat([x, y]),
    "stack": lambda x, y: torch.stack([x, y]),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "addcmul": lambda x, y: torch.addcmul(x, x, y),
    "maximum": lambda x, y: torch.maximum(x, y),
    "masked_select": lambda x, y: torch.masked_select(x, y > 0),  # data-dependent path
    "add_out": lambda x, y: torch.add(x, x, out=y),
    "lerp": lambda x, y: torch.lerp(x, y, 0.5),
    "index_add": lambda x, y: x.index_add(0, torch.tensor([0, 1], device=x.device), y[:2]),
    "linear": lambda x, y: torch.nn.functional.linear(x, y),
    "conv2d": lambda x, y: torch.nn.functional.conv2d(x.view(1, 1, 4, 4), y.view(1, 1, 4, 4)),
}

PAIRS = {
    "openreg0-openreg1": ("openreg:0", "openreg:1"),
    "openreg1-openreg0": ("openreg:1", "openreg:0"),
    "openreg-cpu": ("openreg:0", "cpu"),
    "cpu-openreg": ("cpu", "openreg:0"),
}


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("name", BINARY_OPS)
def test_mixed_devices_raise(name, pair):
    first, second = PAIRS[pair]
    x = torch.randn(4, 4, device=first)
    y = torch.randn(4, 4, device=second)
    with pytest.raises(RuntimeError, match=OWN_CHECK.get(name, SAME_DEVICE)):
        BINARY_OPS[name](x, y)
    # The check ran on the host: nothing failed on a stream.
    z = torch.ones(2, device="openreg:0") * 2
    assert z.cpu().tolist() == [2.0, 2.0]
    torch.openreg.synchronize(0)
    torch.openreg.synchronize(1)


def test_message_names_both_devices():
    x = torch.randn(3, device="openreg:0")
    with pytest.raises(RuntimeError, match=r"openreg:0 and openreg:1"):
        x + torch.randn(3, device="openreg:1")


def test_zero_dim_cpu_tensor_is_a_scalar():
    x = torch.arange(4.0, device="openreg")
    y = x * torch.tensor(3.0)
    assert y.device.type == "openreg"
    assert y.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    assert torch.where(x > 1, x, torch.tensor(-1.0)).cpu().tolist() == [-1.0, -1.0, 2.0, 3.0]


def test_cpu_index_tensors_are_accepted():
    # CUDA accepts CPU index tensors for advanced indexing.
    x = torch.arange(6.0, device="openreg")
    index = torch.tensor([4, 1])
    assert x[index].cpu().tolist() == [4.0, 1.0]
    x[index] = torch.tensor([-1.0, -2.0], device="openreg")
    assert x.cpu().tolist() == [0.0, -2.0, 2.0, 3.0, -1.0, 5.0]


def test_copy_between_devices_is_allowed():
    x = torch.randn(5, device="openreg:0")
    y = torch.empty(5, device="openreg:1")
    y.copy_(x)
    assert torch.equal(y.cpu(), x.cpu())
    assert torch.equal(x.to("openreg:1").cpu(), x.cpu())
    assert x.to("openreg:1").device == torch.device("openreg:1")


def test_op_runs_on_its_inputs_device():
    # Not the current device: the op must follow its inputs (device guard).
    x = torch.randn(3, device="openreg:1")
    y = (x + 1).sin()
    assert y.device == torch.device("openreg:1")
    assert torch.openreg.current_device() == 0
    torch.testing.assert_close(y.cpu(), (x.cpu() + 1).sin())


def test_cpu_scalar_is_read_at_launch_not_when_the_kernel_runs():
    # CUDA passes a CPU scalar's value at launch: changing (or freeing) the
    # tensor afterwards must not change a result still queued.
    x = torch.arange(4.0, device="openreg")
    s = torch.tensor(2.0)
    torch.openreg._sleep(150)
    y = x * s
    w = torch.where(x > 1, x, s)
    s.fill_(100.0)
    assert y.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert w.cpu().tolist() == [2.0, 2.0, 2.0, 3.0]


def test_where_with_a_cpu_scalar_self_lands_on_the_device():
    x = torch.tensor([1.0, 2.0, 3.0], device="openreg")
    torch.openreg._sleep(100)
    out = torch.where(x != 2, torch.tensor(9.0), x)
    assert out.device.type == "openreg"
    assert out.cpu().tolist() == [9.0, 2.0, 9.0]


def test_python_number_operands_keep_their_lower_promotion_rank():
    # Through the generic fallback too: the private copy of a Python number
    # stays a "wrapped number", so int tensor (op) float number -> float32.
    x = torch.arange(-30, 30, dtype=torch.int32)
    for op in (lambda t: torch.floor_divide(t, 2.5), lambda t: torch.fmod(t, 2.7),
               lambda t: torch.remainder(t, 2.7), lambda t: torch.xlogy(t, 2.7)):
        for _ in range(2):  # the second call takes the cached metadata
            got, want = op(x.to("openreg")), op(x)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_out_argument_that_grows_gets_the_whole_result():
    # The growing resize queues a copy of the old contents into the new block;
    # the result must land after it, not under it.
    x = torch.ones(4000)
    for _ in range(10):
        out = torch.full((1000, 1), -1, dtype=torch.long, device="openreg")
        torch.nonzero(x.to("openreg"), out=out)
        assert torch.equal(out.cpu(), torch.nonzero(x))


def test_cpu_output_of_a_device_op_raises():
    x = torch.arange(4.0, device="openreg")
    out = torch.tensor(0.0)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.sum(x, 0, out=out)


def test_set_on_another_device_than_the_current_one():
    x = torch.ones(3, device="openreg:1")
    x.set_()
    assert x.device == torch.device("openreg:1") and x.numel() == 0


def test_cpu_scalar_output_of_a_native_kernel_raises():
    # A 0-dim CPU tensor passes as a scalar operand, but not as what a kernel writes.
    a, b = torch.ones(2, device="openreg"), torch.ones(2, device="openreg")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.cat([a, b], out=torch.tensor(0.0))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.tensor(1.0).add_(torch.ones((), device="openreg"))


def test_foreach_lists_spread_over_devices_run_each_element_on_its_device():
    # CUDA's foreach slow path: each element on its own device (and stream).
    cpu = [torch.arange(3.0), torch.arange(4.0) + 1, torch.arange(2.0) - 1]
    devs = [t.to(d) for t, d in zip(cpu, ["openreg:0", "openreg:1", "openreg:0"])]
    got = torch._foreach_add(devs, devs, alpha=2)
    assert [g.device for g in got] == [d.device for d in devs]
    for g, c in zip(got, torch._foreach_add(cpu, cpu, alpha=2)):
        torch.testing.assert_close(g.cpu(), c)
    torch._foreach_mul_(devs, 3.0)
    torch._foreach_mul_(cpu, 3.0)
    for d, c in zip(devs, cpu):
        torch.testing.assert_close(d.cpu(), c)
    norms = torch._foreach_norm(devs)
    assert [n.device for n in norms] == [d.device for d in devs]
    torch.testing.assert_close(torch.stack([n.cpu() for n in norms]), torch.stack(torch._foreach_norm(cpu)))
    # One element mixing devices is still an error, with CUDA's message.
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch._foreach_add([devs[0]], [devs[1][:3]])


def test_module_to_keeps_its_parameters_so_the_optimizer_still_trains_them():
    # Module.to / .cpu swap `param.data` in place when the backend says CPU and
    # the device are shallow-copy compatible (as CUDA's are): the optimizer
    # then holds the module's parameters. Without it, to() makes new
    # Parameters and the optimizer steps the stale CPU ones.
    m = torch.nn.Linear(3, 3)
    weight = m.weight
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.to("openreg:1")
    assert m.weight is weight and weight.device == torch.device("openreg:1")
    before = weight.detach().cpu().clone()
    m(torch.randn(2, 3, device="openreg:1")).sum().backward()
    opt.step()
    assert not torch.equal(before, m.weight.detach().cpu())
    m.cpu()
    assert m.weight is weight and weight.device.type == "cpu"
    t = torch.zeros(2)
    t.data = torch.ones(2, device="openreg")
    assert t.device.type == "openreg" and t.cpu().tolist() == [1.0, 1.0]
