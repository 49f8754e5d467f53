"""openreg kernels for ATen's fused RNN cells (registered for PrivateUse1).

ATen's lstm_cell / gru_cell (and so nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell)
take the fused path for CUDA, XPU *and PrivateUse1* devices:
_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backward ops, which
exist only as CUDA kernels, so the generic fallback has no CPU kernel to run.
These implementations compose ATen ops on openreg with CUDA's math and CUDA's
workspace layout (LSTM: [i, f, g, o] activated gates; GRU: [r, z, n, hx, hn]),
which their autograd formulas rely on.
Tests: tests/ops/test_modules.py (nn.LSTM/GRU and cells), tests/ops/test_amp.py.
"""
import torch

_lib = torch.library.Library("aten", "IMPL")


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat([grad_c * g * i * (1 - i),        # input gate
                            grad_c * cx * f * (1 - f),       # forget gate
                            grad_c * i * (1 - g * g),        # cell gate
                            grad_hy * tanh_cy * o * (1 - o)], 1)  # output gate
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * r * (1 - r)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    grad_hx = grad_hy * z
    if has_bias:
        return (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0),
                grad_hidden_gates.sum(0))
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None


_lib.impl("_thnn_fused_lstm_cell", _lstm_cell, "PrivateUse1")
_lib.impl("_thnn_fused_lstm_cell_backward_impl", _lstm_cell_backward, "PrivateUse1")
_lib.impl("_thnn_fused_gru_cell", _gru_cell, "PrivateUse1")
_lib.impl("_thnn_fused_gru_cell_backward", _gru_cell_backward, "PrivateUse1")
