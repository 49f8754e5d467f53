"""torch.compile's default backend (Inductor) on openreg (openreg/_inductor):
C++ kernels generated as for the CPU, launched on the current openreg stream."""
import pytest
import torch
import torch.nn as nn
from torch._inductor.utils import fresh_cache, run_and_get_code

DEV = torch.device("openreg:0")


@pytest.fixture(autouse=True)
def fresh_compile():
    # Every test compiles for real (no artifacts of earlier runs or tests).
    torch._dynamo.reset()
    with fresh_cache():
        yield
    torch._dynamo.reset()


def compiled_code(fn, *args):
    out, code = run_and_get_code(torch.compile(fn), *args)
    return out, "\n".join(code)


def test_fused_kernel_runs_on_the_tensors_device():
    def f(x, y):
        return (x * 2 + y).relu().sum(1)

    dev = torch.device("openreg:1")
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    out, code = compiled_code(f, x.to(dev), y.to(dev))
    assert "openreg_build_kernel" in code  # a generated kernel, not eager fallbacks
    assert "device='openreg:1'" in code  # buffers on the inputs' device, not the current one
    assert out.device == dev
    torch.testing.assert_close(out.cpu(), f(x, y))


def test_kernel_is_queued_on_the_current_stream():
    f = torch.compile(lambda x: x.sin() + 1)
    x = torch.randn(1000, device=DEV)
    f(x)  # compile outside the timing-sensitive part
    torch.openreg.synchronize()
    side = torch.openreg.Stream(DEV)
    with torch.openreg.stream(side):
        torch.openreg._sleep(1000)
        out = f(x)
        # The host returned while the kernel waits behind the sleep on `side`.
        assert not side.query()
    assert torch.openreg.current_stream().query()  # nothing went to the default stream
    side.synchronize()
    torch.testing.assert_close(out.cpu(), x.cpu().sin() + 1)


def test_dynamic_shapes_and_bfloat16():
    def f(x, y):
        return (x.float() * 2 + y).sum(0).to(torch.bfloat16)

    cf = torch.compile(f, dynamic=True)
    for rows in (5, 7, 9):  # sizes reach the kernel as int64 arguments
        x = torch.randn(rows, 8, dtype=torch.bfloat16)
        y = torch.randn(rows, 8)
        out = cf(x.to(DEV), y.to(DEV))
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.cpu(), f(x, y))


def test_graph_with_cpu_and_openreg_tensors():
    def f(x, c):
        return (x * 3).cpu() + c, (x + c.to(x.device)).exp()

    x, c = torch.randn(6), torch.randn(6)
    a, b = torch.compile(f)(x.to(DEV), c)
    assert a.device.type == "cpu" and b.device == DEV
    ra, rb = f(x, c)
    torch.testing.assert_close(a, ra)
    torch.testing.assert_close(b.cpu(), rb)


def test_dropout_uses_the_device_generator():
    x = torch.ones(4000, device=DEV)
    f = torch.compile(lambda x: nn.functional.dropout(x, 0.5, training=True))
    torch.openreg.manual_seed(1)
    a = f(x).cpu()
    torch.openreg.manual_seed(1)
    b = f(x).cpu()
    torch.testing.assert_close(a, b)  # seeded by torch.openreg.manual_seed
    assert set(a.unique().tolist()) == {0.0, 2.0}
    assert 0.45 < (a == 0).float().mean().item() < 0.55


@pytest.mark.parametrize("op", ["dropout", "sdpa"])
def test_checkpointed_random_ops_recompute_the_forwards_numbers(op):
    # Under activation checkpointing AOTAutograd wraps the random ops that stay ATen calls
    # (dropout with fallback_random; SDPA, a random op even at dropout_p=0 as the training
    # job's model calls it) in torch's run_and_save_rng_state / run_with_rng_state, which
    # know only torch's own devices (openreg/_rng_prims.py): the backward must redraw the
    # forward's numbers, so its gradients equal those of the same function compiled
    # without checkpointing (which keeps the forward's mask).
    from torch.utils.checkpoint import checkpoint

    def region(x):
        if op == "dropout":
            return nn.functional.dropout(x * 1.5, 0.5, training=True).sin()
        q = x.view(2, 2, 8, 32)
        return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).reshape(x.shape)

    checkpointed = torch.compile(lambda x: checkpoint(region, x, use_reentrant=False))
    plain = torch.compile(region)
    x = (torch.rand(32, 32) + 0.5).to(DEV).requires_grad_()
    with torch._inductor.config.patch(fallback_random=True):
        for seed in (1, 2):
            grads = []
            for f in (checkpointed, plain):
                torch.openreg.manual_seed(seed)
                f(x).sum().backward()
                grads.append(x.grad.cpu())
                x.grad = None
            torch.testing.assert_close(grads[0], grads[1])
            if op == "dropout":  # a mask was drawn
                assert 0.3 < (grads[0] != 0).float().mean().item() < 0.7


def test_cond_subgraphs():
    def f(p, x):
        return torch.cond(p, lambda x: (x * 2).sin(), lambda x: (x + 1).cos(), (x,))

    cf = torch.compile(f)
    x = torch.randn(10)
    for p in (True, False):
        out = cf(torch.tensor(p, device=DEV), x.to(DEV))
        torch.testing.assert_close(out.cpu(), f(torch.tensor(p), x))


def test_max_autotune_keeps_matmul_on_openreg_kernels():
    a, b = torch.randn(32, 48), torch.randn(48, 16)
    f = torch.compile(lambda a, b: (a @ b).relu() + 1, mode="max-autotune")
    out = f(a.to(DEV), b.to(DEV))
    torch.testing.assert_close(out.cpu(), (a @ b).relu() + 1, rtol=1e-4, atol=1e-4)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.body = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 50))

    def forward(self, idx):
        return self.body(self.emb(idx)).mean(1)


def test_training_matches_cpu_eager():
    torch.manual_seed(0)
    ref = Net()
    model = Net()
    model.load_state_dict(ref.state_dict())
    model.to(DEV)
    step = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for _ in range(4):
        idx, target = torch.randint(0, 50, (8, 12)), torch.randint(0, 50, (8,))
        loss = nn.functional.cross_entropy(step(idx.to(DEV)), target.to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = nn.functional.cross_entropy(ref(idx), target)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        torch.testing.assert_close(loss.cpu(), ref_loss, rtol=1e-4, atol=1e-5)
    for p, rp in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), rp.detach(), rtol=1e-4, atol=1e-5)


def test_race_checker_sees_compiled_kernels():
    f = torch.compile(lambda x: x * 2)
    x = torch.ones(1000, device=DEV)
    f(x)
    torch.openreg.synchronize()
    side = torch.openreg.Stream(DEV)
    with torch.openreg.sanitizer.enabled():
        x.add_(1)  # written on the default stream
        with torch.openreg.stream(side), pytest.raises(RuntimeError,
                                                        match=r"race: a kernel \(cpp_fused_mul_0\)"):
            f(x)  # read on `side` without waiting for it
        torch.openreg.synchronize()
        side.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(side):
            out = f(x)  # ordered now: no report
        torch.openreg.synchronize()
    torch.testing.assert_close(out.cpu(), torch.full((1000,), 4.0))


def test_profiler_names_device_time_after_the_kernel():
    from torch.profiler import ProfilerActivity, profile

    f = torch.compile(lambda x, w: ((x @ w).relu() * 2).sum(1))
    x, w = torch.randn(64, 64, device=DEV), torch.randn(64, 64, device=DEV)
    f(x, w)
    torch.openreg.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        f(x, w)
    device_time = {e.key: e.self_device_time_total for e in prof.key_averages()}
    assert device_time["kernel cpp_fused_mul_relu_sum_0"] > 0  # the generated kernel
    assert device_time["kernel aten::mm"] > 0  # the extern matmul


def test_out_of_bounds_index_fails_the_stream_like_a_device_assert(python):
    result = python("""
        import torch
        w = torch.randn(10, 4, device="openreg")
        i = torch.tensor([1, 12], device="openreg")
        out = torch.compile(lambda w, i: w[i] * 2)(w, i)
        print("launched", flush=True)  # the check runs in the kernel, not at the call
        try:
            out.cpu()
        except torch.AcceleratorError as e:
            print("raised:", e)
    """, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "launched" in result.stdout
    assert "raised: openreg kernel failed asynchronously" in result.stdout
    assert "index out of bounds: 0 <= " in result.stdout


def test_dynamo_knows_openreg_before_any_compile(python):
    result = python("""
        import torch
        from torch._dynamo.device_interface import get_interface_for_device
        for key in ("openreg", "openreg:1"):
            interface = get_interface_for_device(key)
            print(key, interface.device_count(), interface.get_device_properties(1).name)
    """)
    assert result.returncode == 0, result.stderr
    assert "openreg:1 8 openreg simulated device 1" in result.stdout


def test_device_queries_compile_without_a_graph_break():
    # As torch.cuda's: folded to constants, the current device with a guard.
    def f(x):
        if torch.openreg.is_available() and torch.openreg.device_count() == 8:
            x = x + torch.openreg.get_device_capability()[0]
        x = x * torch.openreg.get_device_properties(x.device).multi_processor_count
        return x.to(torch.device("openreg", torch.openreg.current_device()))

    compiled = torch.compile(f, fullgraph=True)
    x = torch.ones(2, device="openreg")
    torch.testing.assert_close(compiled(x), f(x))
    torch.openreg.set_device(1)
    try:
        assert compiled(x).device == torch.device("openreg:1")
    finally:
        torch.openreg.set_device(0)


def test_cpp_wrapper_mode_is_refused():
    f = torch.compile(lambda x: x + 1)
    with torch._inductor.config.patch(cpp_wrapper=True):
        with pytest.raises(Exception, match="cpp_wrapper mode is not supported"):
            f(torch.ones(3, device=DEV))


def test_the_fx_graph_cache_keys_on_openregs_code_generators(python, tmp_path):
    # Each run a fresh process on one cache directory: the same code generators
    # hit the cache, changed ones (another digest of openreg/_inductor) miss it.
    script = """
        import os, torch
        import openreg._inductor.cache_key as key
        if os.environ.get("DIGEST"):
            key.codegen_sources = os.environ["DIGEST"]
        from torch._dynamo.utils import counters
        f = torch.compile(lambda x: x.sin() * 2 + 1)
        x = torch.randn(16, device="openreg")
        assert torch.allclose(f(x).cpu(), x.cpu().sin() * 2 + 1)
        print(counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"])
    """
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
    outs = []
    for digest in ("", "", "changed code generators"):
        r = python(script, env={**env, "DIGEST": digest})
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.split())
    assert outs == [["0", "1"], ["1", "0"], ["0", "1"]]
