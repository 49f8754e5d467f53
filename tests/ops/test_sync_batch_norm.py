"""The operators behind nn.SyncBatchNorm (csrc/aten/SyncBatchNorm.cpp), which
have CUDA kernels and no CPU ones: two "ranks" emulated in one process (each
half of a batch), checked against batch norm of the whole batch on the CPU."""
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sizes", [(5, 7), (3, 3)])  # uneven and even halves
def test_sync_batch_norm_ops_match_batch_norm_of_the_whole_batch(dtype, sizes):
    torch.manual_seed(0)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    eps, momentum = 1e-5, 0.1
    x = torch.randn(sum(sizes), 3, 4, 5, dtype=dtype)
    w, b, gy = torch.randn(3, dtype=dtype), torch.randn(3, dtype=dtype), torch.randn_like(x)
    dev = lambda t: t.to("openreg")
    halves = [dev(h) for h in x.split(list(sizes))]

    # Forward: local stats, gathered with counts, normalised.
    stats = [torch.batch_norm_stats(h, eps) for h in halves]
    counts = dev(torch.tensor([float(h.numel() // 3) for h in halves], dtype=dtype))
    running_mean, running_var = dev(torch.zeros(3, dtype=dtype)), dev(torch.ones(3, dtype=dtype))
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        halves[0], torch.stack([m for m, _ in stats]), torch.stack([s for _, s in stats]),
        running_mean, running_var, momentum, eps, counts)
    out = torch.cat([torch.batch_norm_elemt(h, dev(w), dev(b), mean, invstd, eps) for h in halves])

    ref_rm, ref_rv = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    xr = x.clone().requires_grad_()
    wr, br = w.clone().requires_grad_(), b.clone().requires_grad_()
    ref = F.batch_norm(xr, ref_rm, ref_rv, wr, br, training=True, momentum=momentum, eps=eps)
    ref.backward(gy)
    torch.testing.assert_close(out.cpu(), ref.detach(), **tol)
    torch.testing.assert_close(running_mean.cpu(), ref_rm, **tol)
    torch.testing.assert_close(running_var.cpu(), ref_rv, **tol)

    # Backward: local reductions, summed over "ranks", then each half's input gradient.
    gys = [dev(g) for g in gy.split(list(sizes))]
    reduced = [torch.batch_norm_backward_reduce(g, h, mean, invstd, dev(w), True, True, True)
               for g, h in zip(gys, halves)]
    sum_dy = sum(r[0] for r in reduced)
    sum_dy_xmu = sum(r[1] for r in reduced)
    grad_w = sum(r[2] for r in reduced)
    grad_b = sum(r[3] for r in reduced)
    count_tensor = dev(torch.tensor([h.numel() // 3 for h in halves], dtype=torch.int32))
    grad_x = torch.cat([torch.batch_norm_backward_elemt(g, h, mean, invstd, dev(w), sum_dy, sum_dy_xmu, count_tensor)
                        for g, h in zip(gys, halves)])
    torch.testing.assert_close(grad_x.cpu(), xr.grad, **tol)
    torch.testing.assert_close(grad_w.cpu(), wr.grad, **tol)
    torch.testing.assert_close(grad_b.cpu(), br.grad, **tol)


def test_backward_reduce_leaves_unrequested_results_undefined():
    x = torch.randn(4, 3, device="openreg")
    mean, invstd = torch.batch_norm_stats(x, 1e-5)
    sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(
        torch.ones_like(x), x, mean, invstd, torch.ones(3, device="openreg"), False, True, False)
    assert sum_dy is None and sum_dy_xmu is None and gb is None and gw.shape == (3,)


def test_half_inputs_keep_float32_statistics():
    x = torch.randn(6, 3, 2, device="openreg", dtype=torch.float16)
    mean, invstd = torch.batch_norm_stats(x, 1e-5)
    assert mean.dtype == invstd.dtype == torch.float32
    ref_var, ref_mean = torch.var_mean(x.cpu().float(), dim=(0, 2), correction=0)
    torch.testing.assert_close(mean.cpu(), ref_mean)
    torch.testing.assert_close(invstd.cpu(), (ref_var + 1e-5).rsqrt())
