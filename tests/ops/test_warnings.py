"""Kernels warn what the CPU warns, and nothing more.

A CPU kernel that the generic fallback runs on a stream prints its warnings
from the stream thread (C++'s handler, to stderr): a warning the CPU op itself
does not give is noise the user cannot act on.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

LOSSES = {
    # The composite kernels of these two call the .out op with the reduced
    # 0-dim output, which the CPU .out kernel sizes elementwise first and warns
    # about (RegisterFallbackRoutes.cpp routes them to the fallback instead).
    "mse_loss": F.mse_loss,
    "smooth_l1_loss": F.smooth_l1_loss,
    "smooth_l1_loss_beta0": lambda x, y: F.smooth_l1_loss(x, y, beta=0.0),
    "huber_loss": F.huber_loss,
    "l1_loss": F.l1_loss,
}


def run_and_collect_warnings(fn, device, capfd):
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0)).to(device).requires_grad_()
    y = torch.randn(4, 3, generator=torch.Generator().manual_seed(1)).to(device)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as python_warnings:
        warnings.simplefilter("always")
        loss = fn(x, y)
        loss.backward()
        if device != "cpu":
            torch.openreg.synchronize()
    printed = capfd.readouterr().err
    return loss.detach().cpu(), x.grad.cpu(), [str(w.message) for w in python_warnings], printed


@pytest.mark.parametrize("name", LOSSES)
def test_reduced_losses_warn_nothing_the_cpu_does_not(name, capfd):
    cpu = run_and_collect_warnings(LOSSES[name], "cpu", capfd)
    dev = run_and_collect_warnings(LOSSES[name], "openreg", capfd)
    torch.testing.assert_close(dev[0], cpu[0], rtol=0, atol=0)
    torch.testing.assert_close(dev[1], cpu[1], rtol=0, atol=0)
    assert dev[2] == cpu[2]
    assert "Warning" not in dev[3], dev[3]
