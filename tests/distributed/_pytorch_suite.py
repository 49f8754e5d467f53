"""PyTorch's own distributed suite (`DistributedTest._DistTestBase`, shipped in the
wheel) as a unittest class, built the way PyTorch's
test/distributed/test_distributed_spawn.py builds it.

The backend is taken from the environment variable BACKEND (default
"oreg_ccl"; "gloo" for the comparison run), the world size from WORLD_SIZE
(default 2). `distributed_test` evaluates its skip decorators when it is
imported, so oreg_ccl is registered in `DistTestCases.backend_feature`
("ddp", "subgroup", "plugin") before that import, with INIT_METHOD pointing at
a file:// store (the suite gates some tests on it). The suite's device
decisions depend on CUDA/HPU/XPU only, so for oreg_ccl (as for gloo on this
machine) every test runs on CPU tensors.

Each test spawns WORLD_SIZE fresh interpreters (MultiProcessTestCase); they
re-import this module and initialise the process group over the test's
FileStore. The environment variables the suite reads are set only while the
suite imports and while a test runs, so importing this module leaves the
pytest worker's environment as it was.
"""
import contextlib
import os

import torch  # noqa: F401  (loads openreg through the torch.backends entry point)
import torch.distributed as dist

BACKEND = os.environ.get("BACKEND", "oreg_ccl")
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "2"))
# Per-test limit of MultiProcessTestCase (ranks are terminated after it).
PER_TEST_TIMEOUT = int(os.environ.get("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "300"))


@contextlib.contextmanager
def suite_environment(**extra):
    """The variables `distributed_test` and `common_distributed` read."""
    values = {"BACKEND": BACKEND, "WORLD_SIZE": str(WORLD_SIZE),
              "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(PER_TEST_TIMEOUT), **extra}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# A spawned rank inherits INIT_METHOD (file://<test's temp dir>) from the test;
# at collection time any file:// value opens the file://-only gates.
with suite_environment(INIT_METHOD=os.environ.get("INIT_METHOD", "file:///nonexistent")):
    from torch.testing._internal.common_distributed import DistTestCases

    if BACKEND not in ("gloo", "nccl", "ucc", "mpi"):
        if BACKEND not in dist.Backend.backend_list:
            raise RuntimeError(f"backend {BACKEND!r} is not registered (openreg not loaded?)")
        for feature in ("ddp", "subgroup", "plugin"):
            DistTestCases.backend_feature[feature].add(BACKEND)

    from torch.testing._internal.distributed.distributed_test import (
        DistributedTest,
        TestDistBackend,
    )


# Tests the suite gates on the literal backend name "gloo" although they only
# use the generic c10d API (no body branches on BACKEND): run for oreg_ccl too.
# Only the name gate is lifted: a test is un-skipped only if its skip reason is
# one of these, so any other skip condition stays in force.
NAME_GATED = {
    "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    "test_get_future", "test_scatter_object_list", "test_grads_same_across_ranks_with_no_sync",
    "test_barrier_timeout_global", "test_barrier_timeout_full_group",
    "test_sparse_all_reduce_sum",
} | {f"test_all_reduce_coalesced{g}_{op}" for g in ("", "_group", "_full_group")
     for op in ("sum", "product", "min", "max")}
NAME_GATE_REASONS = {
    "Only gloo backend supports timeouts",
    "GLOO Batch Send Recv CPU",
    "Only Gloo backend supports sparse all reduce",
    "get_future is only supported on mpi, nccl and gloo",
    f"Test requires backend {BACKEND} to be one of {{'gloo'}}",
}


def lift_name_gates(cls):
    lifted = []
    if BACKEND == "gloo":
        return lifted
    for name in sorted(NAME_GATED):
        fn = getattr(cls, name, None)
        if fn is not None and getattr(fn, "__unittest_skip__", False) and \
                getattr(fn, "__unittest_skip_why__", None) in NAME_GATE_REASONS:
            fn.__unittest_skip__ = False
            lifted.append(name)
    return lifted


class PyTorchDistributedSuite(TestDistBackend, DistributedTest._DistTestBase):
    @property
    def world_size(self):
        return str(WORLD_SIZE)

    def setUp(self):
        self._env = suite_environment()
        self._env.__enter__()
        # TestDistBackend.setUp creates the test's temp dir (TEMP_DIR, INIT_METHOD).
        self._env_test = suite_environment(TEMP_DIR="", INIT_METHOD="")
        self._env_test.__enter__()
        super().setUp()
        self._spawn_processes()

    def tearDown(self):
        try:
            super().tearDown()
            for p in self.processes_at_teardown():
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join()
        finally:
            self._env_test.__exit__(None, None, None)
            self._env.__exit__(None, None, None)

    def processes_at_teardown(self):
        return list(getattr(self, "_spawned", []))

    def _start_processes(self, proc):
        super()._start_processes(proc)
        self._spawned = list(self.processes)


LIFTED = lift_name_gates(PyTorchDistributedSuite)
