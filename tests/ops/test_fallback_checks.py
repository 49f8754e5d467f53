"""Checks and fix-ups around the generic fallback for particular operators, and
the host-side checks of native kernels the CPU makes inside its kernels
(csrc/aten/FallbackChecks.cpp, FusedOptimizers.cpp, Foreach.cpp): the error is
raised at the call, in the CPU's words, and the stream stays usable."""
import pytest
import torch


def _stream_still_works():
    assert (torch.ones(2, device="openreg") + 1).tolist() == [2.0, 2.0]


def _amp_update_args(device, scale_dtype=torch.float32, tracker_dtype=torch.int32, inf_dtype=torch.float32, n=1):
    return (torch.full((n,), 1024.0, dtype=scale_dtype, device=device),
            torch.zeros(1, dtype=tracker_dtype, device=device),
            torch.zeros(1, dtype=inf_dtype, device=device))


@pytest.mark.parametrize("bad", [dict(tracker_dtype=torch.int64), dict(scale_dtype=torch.float16),
                                 dict(inf_dtype=torch.float64), dict(n=2)])
def test_amp_update_scale_checks_its_arguments_at_the_call(bad):
    with pytest.raises(RuntimeError) as cpu:
        torch._amp_update_scale_(*_amp_update_args("cpu", **bad), 2.0, 0.5, 2)
    with pytest.raises(RuntimeError) as dev:
        torch._amp_update_scale_(*_amp_update_args("openreg", **bad), 2.0, 0.5, 2)
    assert str(dev.value) == str(cpu.value)
    _stream_still_works()


def test_amp_update_scale_updates_like_the_cpu():
    for device in ("cpu", "openreg"):
        scale, tracker, found_inf = _amp_update_args(device)
        for step in range(3):  # growth after 2 good steps
            torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
        found_inf.fill_(1.0)
        torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
        if device == "cpu":
            expected = (scale.item(), tracker.item())
    assert (scale.item(), tracker.item()) == expected == (1024.0, 0)


def test_multi_head_attention_fast_path_gives_no_weights_unless_needed():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        out_cpu, w_cpu = m(x, x, x, need_weights=False)
        mo = m.to("openreg")
        out, w = mo(x.to("openreg"), x.to("openreg"), x.to("openreg"), need_weights=False)
        assert w_cpu is None and w is None
        torch.testing.assert_close(out.cpu(), out_cpu)
        out, w = mo(x.to("openreg"), x.to("openreg"), x.to("openreg"), need_weights=True)
        _, w_cpu = m.to("cpu")(x, x, x, need_weights=True)
        torch.testing.assert_close(w.cpu(), w_cpu)


def test_fused_adamw_rejects_an_unsupported_dtype_at_the_call():
    def call(device):
        ints = lambda: [torch.ones(3, dtype=torch.int64, device=device)]
        torch._fused_adamw_(ints(), ints(), ints(), ints(), [], [torch.tensor(1.0, device=device)],
                            lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
                            amsgrad=False, maximize=False)
    with pytest.raises(NotImplementedError) as cpu:
        call("cpu")
    with pytest.raises(NotImplementedError) as dev:
        call("openreg")
    assert str(dev.value) == str(cpu.value)
    _stream_still_works()


def test_foreach_infinity_norm_of_an_empty_tensor():
    for device in ("cpu", "openreg"):
        with pytest.raises(RuntimeError, match="_foreach_norm cannot compute the infinity norm"):
            torch._foreach_norm([torch.ones(2, device=device), torch.zeros(0, device=device)], float("inf"))
    _stream_still_works()
