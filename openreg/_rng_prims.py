"""torch.compile of activation-checkpointed code: torch's RNG wrappers for openreg.

AOTAutograd's partitioner wraps each random operator that a checkpointed region
recomputes in the backward (dropout, scaled_dot_product_attention) in the higher-order
operators ``torch._prims.rng_prims.run_and_save_rng_state`` (forward: save the device's
RNG state, run the op) and ``run_with_rng_state`` (backward: run the op from that state),
so the recompute draws the forward's numbers. torch implements them for CPU, CUDA, HPU and
XPU only, in a device table inside each operator (a PrivateUse1 device fails the
compilation with ``AssertionError: Backend not supported for openreg``), and its
extension point for other devices (``register_graphsafe_rng_device_type``) needs Inductor
support that is CUDA's alone in torch 2.13. This gives both operators openreg's
implementation, as torch's CUDA one: ``torch.openreg.get_rng_state`` /
``set_rng_state`` of the op's device around the call. The rest of the operators'
behaviour (other devices, autograd, functionalization) stays torch's.
"""
import torch
from torch._C import DispatchKey


def _device_of(args, kwargs):
    """The op's device, found as torch's table finds it (rng_prims.get_device)."""
    if kwargs.get("device"):
        return torch.device(kwargs["device"])
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device
    return None


def _save_and_run(op, *args, **kwargs):
    device = _device_of(args, kwargs)
    return torch.openreg.get_rng_state(device), op(*args, **kwargs)


def _run_from_state(rng_state, op, *args, **kwargs):
    device = _device_of(args, kwargs)
    current = torch.openreg.get_rng_state(device)
    torch.openreg.set_rng_state(rng_state, device)
    try:
        return op(*args, **kwargs)
    finally:
        torch.openreg.set_rng_state(current, device)


def _on_openreg(args, kwargs):
    device = _device_of(args, kwargs)
    return device is not None and device.type == "openreg"


def register() -> None:
    from torch._higher_order_ops.utils import registered_hop_fake_fns
    from torch._prims import rng_prims
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode, track_tensor_tree
    import torch.utils._pytree as pytree

    save_op, run_op = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state
    if getattr(save_op, "_openreg_registered", False):
        return
    save_op._openreg_registered = True

    # BackendSelect (which every call reaches first), FakeTensorMode and
    # ProxyTorchDispatchMode go through torch's device table (a closure): route
    # openreg ops to the functions above, the rest to torch's.
    def select(hop, ours):
        theirs = hop.py_kernels[DispatchKey.BackendSelect]

        def backend_select(*args, **kwargs):
            call_args = args[1:] if hop is save_op else args[2:]
            return (ours if _on_openreg(call_args, kwargs) else theirs)(*args, **kwargs)

        hop.py_kernels[DispatchKey.BackendSelect] = backend_select

    select(save_op, _save_and_run)
    select(run_op, _run_from_state)

    theirs_fake = registered_hop_fake_fns[save_op]

    def save_fake(op, *args, **kwargs):
        return _save_and_run(op, *args, **kwargs) if _on_openreg(args, kwargs) else \
            theirs_fake(op, *args, **kwargs)

    registered_hop_fake_fns[save_op] = save_fake

    theirs_proxy = save_op.python_key_table[ProxyTorchDispatchMode]

    def save_proxy(mode, op, *args, **kwargs):
        if not _on_openreg(args, kwargs):
            return theirs_proxy(mode, op, *args, **kwargs)
        out = _save_and_run(op, *args, **kwargs)
        proxy_args = pytree.tree_map(mode.tracer.unwrap_proxy, (op, *args))
        proxy_kwargs = pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
        out_proxy = mode.tracer.create_proxy("call_function", save_op, proxy_args, proxy_kwargs)
        return track_tensor_tree(out, out_proxy, constant=None, tracer=mode.tracer)

    save_op.python_key_table[ProxyTorchDispatchMode] = save_proxy
    for hop in (save_op, run_op):
        hop._dispatch_cache.clear()
