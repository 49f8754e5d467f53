"""A dtype a kernel does not support raises at the call, as on CUDA.

CUDA's AT_DISPATCH runs on the host at launch: `torch.softmax` of an int
tensor raises NotImplementedError at once. openreg's kernels are CPU code run
on a stream, so the same check would fail the stream at the next call; the
dispatch probe (csrc/aten/DispatchProbe.h) makes it on the host. For the
native kernels and a set of fallback ops, in every dtype, including calls whose
shapes, scalars or dims take another CPU path than an earlier rejected call: openreg raises what
the CPU raises (type and message), synchronously, and accepts what the CPU
accepts. Runs in a subprocess: an error that does arrive on the stream would
fail every later test of the pytest worker.
"""
import json
import subprocess
import sys

import torch
import torch.nn.functional as F

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
          torch.complex32, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
          torch.float8_e5m2]


def make(shape, dtype, device):
    if dtype == torch.bool:
        return (torch.rand(shape) > 0.5).to(device)
    return (torch.rand(shape) * 3 + 1).to(dtype).to(device)


def index(device):
    return torch.tensor([0, 1, 2, 3], device=device)


def rejected_first(first, then):
    """`then` after `first` raised NotImplementedError (or not): a verdict for
    one call must not be reused for another that takes another CPU path."""
    try:
        first()
    except NotImplementedError:
        pass
    return then()


# name -> (fn(device, dtype), dtypes to try)
CASES = {
    # native kernels (csrc/aten/NativeKernels.h)
    "add": (lambda d, t: torch.add(make((4, 4), t, d), make((4, 4), t, d)), DTYPES),
    "mul_by_one_element": (lambda d, t: make((4, 4), t, d) * make((1, 1), t, d), DTYPES),
    "div": (lambda d, t: torch.div(make((4, 4), t, d), make((4, 4), t, d)), DTYPES),
    "lerp": (lambda d, t: torch.lerp(make((4, 4), t, d), make((4, 4), t, d), 0.5), DTYPES),
    "addcmul": (lambda d, t: torch.addcmul(*(make((4, 4), t, d) for _ in range(3))), DTYPES),
    "exp": (lambda d, t: torch.exp(make((4, 4), t, d)), DTYPES),
    "silu": (lambda d, t: F.silu(make((4, 4), t, d)), DTYPES),
    "gelu": (lambda d, t: F.gelu(make((4, 4), t, d)), DTYPES),
    "gelu_tanh": (lambda d, t: F.gelu(make((4, 4), t, d), approximate="tanh"), DTYPES),
    "gelu_backward": (lambda d, t: torch.ops.aten.gelu_backward(make((4, 4), t, d),
                                                                make((4, 4), t, d)), DTYPES),
    "threshold_backward": (lambda d, t: torch.ops.aten.threshold_backward(
        make((4, 4), t, d), make((4, 4), t, d), 0), DTYPES),
    "pow": (lambda d, t: torch.pow(make((4, 4), t, d), 2), DTYPES),
    "relu": (lambda d, t: torch.relu(make((4, 4), t, d)), DTYPES),
    "mm": (lambda d, t: torch.mm(make((4, 4), t, d), make((4, 4), t, d)), DTYPES),
    "baddbmm": (lambda d, t: torch.baddbmm(*(make((2, 4, 4), t, d) for _ in range(3))), DTYPES),
    "pow_special_exponents": (lambda d, t: (lambda x: rejected_first(
        lambda: torch.pow(x, 2), lambda: (torch.pow(x, 1), torch.pow(x, 0))))(make((4,), t, d)),
        DTYPES),
    "clamp_nan_after_clamp": (lambda d, t: (lambda x: rejected_first(
        lambda: torch.clamp(x, 0.0, 1.0), lambda: torch.clamp(x, float("nan"), 1.0)))(
        make((4,), t, d)), DTYPES),
    "sum": (lambda d, t: torch.sum(make((4, 4), t, d), 1), DTYPES),
    "softmax": (lambda d, t: torch._softmax(make((4, 4), t, d), 1, False), DTYPES),
    "log_softmax_backward": (lambda d, t: torch.ops.aten._log_softmax_backward_data(
        make((4, 4), t, d), make((4, 4), t, d), 1, t), DTYPES),
    "max": (lambda d, t: torch.max(make((4, 4), t, d)), DTYPES),
    "argmax": (lambda d, t: torch.argmax(make((4, 4), t, d), 1), DTYPES),
    "argmax_over_a_size_1_dim": (lambda d, t: torch.argmax(make((1, 4), t, d), 0), DTYPES),
    "argmax_dim_after_other_dim": (lambda d, t: (lambda x: rejected_first(
        lambda: x.argmax(1), lambda: x.argmax(0)))(make((1, 4), t, d)), DTYPES),
    "vector_norm": (lambda d, t: torch.linalg.vector_norm(make((4, 4), t, d)), DTYPES),
    "layer_norm": (lambda d, t: torch.native_layer_norm(make((4, 4), t, d), [4], None, None,
                                                        1e-5), DTYPES),
    "nll_loss": (lambda d, t: torch.ops.aten.nll_loss_forward(make((4, 4), t, d), index(d), None,
                                                              1, -100), DTYPES),
    "embedding_backward": (lambda d, t: torch.ops.aten.embedding_dense_backward(
        make((4, 4), t, d), index(d), 5, -1, False), DTYPES),
    "index_select": (lambda d, t: torch.index_select(make((4, 4), t, d), 0, index(d)), DTYPES),
    "foreach_lerp_": (lambda d, t: torch._foreach_lerp_([make((4, 4), t, d)],
                                                        [make((4, 4), t, d)], 0.5), DTYPES),
    "foreach_norm": (lambda d, t: torch._foreach_norm([make((4, 4), t, d)]), DTYPES),
    # Integer sdpa: the math path's bmm gets float and integer operands
    # (RuntimeError "expected scalar type ...", a typed data pointer's check).
    "sdpa": (lambda d, t: F.scaled_dot_product_attention(*(make((1, 2, 4, 8), t, d)
                                                           for _ in range(3))), DTYPES),
    # the generic fallback
    "cumsum": (lambda d, t: torch.cumsum(make((4, 4), t, d), 0), DTYPES),
    "erf": (lambda d, t: torch.erf(make((4, 4), t, d)), DTYPES),
    "topk": (lambda d, t: torch.topk(make((4, 4), t, d), 1), DTYPES),
    "floor": (lambda d, t: torch.floor(make((4, 4), t, d)), DTYPES),
    "abs": (lambda d, t: torch.abs(make((4, 4), t, d)), DTYPES),
    "remainder": (lambda d, t: torch.remainder(make((4, 4), t, d), make((4, 4), t, d)), DTYPES),
    "median": (lambda d, t: torch.median(make((4, 4), t, d)), DTYPES),
    "div_floor": (lambda d, t: torch.div(make((4, 4), t, d), make((4, 4), t, d),
                                         rounding_mode="floor"), DTYPES),
    "flip_rank_then_dims": (lambda d, t: rejected_first(
        lambda: make((5,), t, d).flip(0),
        lambda: (make((5, 5), t, d).flip(0), make((5, 1), t, d).flip(0))), DTYPES),
    "sort_expanded": (lambda d, t: make((1, 6), t, d).expand(6, 6).sort(0), DTYPES),
    "pdist_one_row": (lambda d, t: F.pdist(make((1, 4), t, d)), DTYPES),
    "cumsum_out": (lambda d, t: torch.cumsum(make((4, 4), t, d), 0,
                                             out=torch.empty(0, dtype=t, device=d)), DTYPES),
}


def outcome(fn, device, dtype):
    """("ok" | "raise" | "deferred", exception type name, first message line)."""
    try:
        fn(device, dtype)
    except Exception as e:  # noqa: BLE001 - the exception itself is compared
        return "raise", type(e).__name__, str(e).splitlines()[0]
    if device != "cpu":
        try:
            torch.openreg.synchronize()
        except Exception as e:  # noqa: BLE001
            return "deferred", type(e).__name__, str(e).splitlines()[0]
    return "ok", "", ""


def main():
    import openreg  # noqa: F401

    mismatches = []
    checked = 0
    for name, (fn, dtypes) in CASES.items():
        for dtype in dtypes:
            cpu, dev = outcome(fn, "cpu", dtype), outcome(fn, "openreg", dtype)
            checked += 1
            if cpu != dev:
                mismatches.append([name, str(dtype), cpu, dev])
            if dev[0] == "deferred":  # the stream is failed from here on
                print(json.dumps({"checked": checked, "mismatches": mismatches, "stopped": True}))
                return
    print(json.dumps({"checked": checked, "mismatches": mismatches, "stopped": False}))


def test_unsupported_dtypes_raise_at_the_call_like_the_cpu():
    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["mismatches"] == [], json.dumps(result["mismatches"], indent=1)
    assert not result["stopped"]
    assert result["checked"] == sum(len(dtypes) for _, dtypes in CASES.values())


if __name__ == "__main__":
    main()
