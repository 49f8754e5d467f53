"""torch.save / torch.load of openreg tensors, modules and optimizer state.

Storages are saved with their "openreg:N" location tag (PyTorch's privateuse1
serialization hooks with our device module) and restored there; map_location
moves them ("cpu", "openreg:1", a dict, a function), and CPU checkpoints load
onto openreg.
"""
import io

import pytest
import torch
from torch import nn


def round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def test_tensor_round_trip_keeps_device_dtype_and_views():
    base = torch.randn(4, 5, device="openreg:1")
    obj = {"base": base, "view": base[1:, ::2], "int": torch.arange(6, device="openreg:1"),
           "bf16": base.to(torch.bfloat16)}
    loaded = round_trip(obj)
    for key, value in obj.items():
        assert loaded[key].device == torch.device("openreg:1"), key
        assert loaded[key].dtype == value.dtype
        assert loaded[key].stride() == value.stride()
        assert torch.equal(loaded[key].cpu(), value.cpu())
    # A view and its base still share one storage after loading.
    assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    loaded["base"][1, 0] = 100.0
    assert loaded["view"][0, 0].item() == 100.0


def test_round_trip_sees_queued_writes():
    # torch.save copies device data to the host in stream order.
    x = torch.zeros(1000, device="openreg")
    torch.openreg._sleep(20)
    x.add_(3)
    assert torch.equal(round_trip(x).cpu(), torch.full((1000,), 3.0))


@pytest.mark.parametrize("map_location,expected", [
    ("cpu", "cpu"),
    ("openreg:1", "openreg:1"),
    (torch.device("openreg", 2), "openreg:2"),
    ({"openreg:0": "openreg:3"}, "openreg:3"),
    (lambda storage, location: storage.openreg(2), "openreg:2"),
    (lambda storage, location: storage, "cpu"),  # as for CUDA: the host copy
])
def test_map_location(map_location, expected):
    x = torch.randn(3, 3, device="openreg:0")
    loaded = round_trip(x, map_location=map_location)
    assert loaded.device == torch.device(expected)
    assert torch.equal(loaded.cpu(), x.cpu())


def test_cpu_checkpoint_loads_onto_openreg():
    model = nn.Linear(4, 2)
    loaded = round_trip(model.state_dict(), map_location="openreg")
    assert all(v.device.type == "openreg" for v in loaded.values())
    target = nn.Linear(4, 2).to("openreg")
    target.load_state_dict(loaded)
    x = torch.randn(3, 4)
    torch.testing.assert_close(target(x.to("openreg")).cpu(), model(x))


def test_missing_device_raises():
    x = torch.randn(2, device="openreg")
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on OPENREG device 99"):
        round_trip(x, map_location="openreg:99")


def _train_steps(model, opt, steps=2):
    for _ in range(steps):
        opt.zero_grad()
        model(torch.ones(2, 4, device=next(model.parameters()).device)).square().sum().backward()
        opt.step()


@pytest.mark.parametrize("weights_only", [True, False])
def test_module_and_optimizer_checkpoint(weights_only):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)).to("openreg")
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    _train_steps(model, opt)
    checkpoint = round_trip({"model": model.state_dict(), "opt": opt.state_dict()},
                            weights_only=weights_only)
    state = checkpoint["opt"]["state"][0]
    assert state["exp_avg"].device.type == "openreg"
    assert state["step"].device.type == "cpu"  # AdamW keeps step on the host (non-capturable)

    # Resuming from the checkpoint continues exactly like the original run.
    resumed = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)).to("openreg")
    resumed.load_state_dict(checkpoint["model"])
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=0.01)
    resumed_opt.load_state_dict(checkpoint["opt"])
    _train_steps(model, opt)
    _train_steps(resumed, resumed_opt)
    for a, b in zip(model.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu())


def test_optimizer_state_moves_to_cpu_and_back():
    model = nn.Linear(4, 3).to("openreg")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train_steps(model, opt)
    on_cpu = round_trip(opt.state_dict(), map_location="cpu")
    assert on_cpu["state"][0]["momentum_buffer"].device.type == "cpu"
    back = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    back.load_state_dict(on_cpu)  # the optimizer casts state to the parameters' device
    assert back.state[model.weight]["momentum_buffer"].device.type == "openreg"
    torch.testing.assert_close(back.state[model.weight]["momentum_buffer"].cpu(),
                               opt.state[model.weight]["momentum_buffer"].cpu())


def test_whole_module_pickle():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()).to("openreg:1")
    loaded = round_trip(model, weights_only=False)
    assert next(loaded.parameters()).device == torch.device("openreg:1")
    x = torch.randn(1, 1, 5, 5, device="openreg:1")
    assert torch.equal(loaded(x).cpu(), model(x).cpu())
