"""Registers oreg_ccl, openreg's c10d backend (C++: csrc/c10d), with torch.distributed.

PyTorch hook: ``Backend.register_backend("oreg_ccl", creator, extended_api=True,
devices=["cpu", "openreg"])``.

After ``import torch`` (autoload) ``dist.init_process_group("oreg_ccl")`` works for
CPU and openreg tensors. The backend class is ``openreg._C._OregCCLBackend``.
"""
import atexit
import warnings

import torch

NAME = "oreg_ccl"


def _create_backend(dist_backend_opts, pg_options):
    # Extended API: called once per group (new_group too) with a store unique to it.
    # As NCCL's: the group's timeout (the timeout= argument, which has a
    # default) wins over pg_options._timeout, with NCCL's warning.
    timeout = dist_backend_opts.timeout
    if pg_options is not None and getattr(pg_options, "_timeout", timeout) != timeout:
        warnings.warn(
            "backend_options._timeout was specified, "
            "but timeout kwarg has a default value that will always override it. ",
            stacklevel=2,
        )
    from . import _C

    return _C._OregCCLBackend(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        timeout,
        # Named in errors of a subgroup beside its own ranks.
        list(dist_backend_opts.global_ranks_in_group),
    )


def register() -> None:
    if not torch.distributed.is_available():
        return
    from torch.distributed import Backend

    if NAME in Backend.backend_list:
        return
    # devices as a list: a string would be iterated character by character.
    Backend.register_backend(NAME, _create_backend, extended_api=True, devices=["cpu", "openreg"])
    from . import _C

    # The thread that destroys finished operations may be waiting for the GIL:
    # stop it while the interpreter can still hand the GIL over (the binding
    # releases it), not during finalisation.
    atexit.register(_C._ccl_stop_releaser)
