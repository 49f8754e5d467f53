"""PyTorch's own distributed suite (`DistributedTest._DistTestBase`, shipped in the
wheel) as a unittest class, built the way PyTorch's
test/distributed/test_distributed_spawn.py builds it.

The backend is taken from the environment variable BACKEND (default
"oreg_ccl"; "gloo" for the comparison run), the world size from WORLD_SIZE
(default 2). `distributed_test` evaluates its skip decorators when it is
imported, so oreg_ccl is registered in `DistTestCases.backend_feature`
("ddp", "subgroup", "plugin", and "gpu"/"cuda" like gloo) before that import,
with INIT_METHOD pointing at a file:// store (the suite gates some tests on it). The suite's device
decisions depend on CUDA/HPU/XPU only, so for oreg_ccl (as for gloo on this
machine) every test runs on CPU tensors.

Each test starts WORLD_SIZE fresh ranks (MultiProcessTestCase; forked from a
preloaded forkserver, or spawned, see START_METHOD) that initialise the process
group over the test's FileStore. The environment variables the suite reads are set only while the
suite imports and while a test runs, so importing this module leaves the
pytest worker's environment as it was.
"""
import contextlib
import os

import torch  # loads openreg through the torch.backends entry point
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.environ.get("BACKEND", "oreg_ccl")
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "2"))
# Per-test limit of MultiProcessTestCase (ranks are terminated after it); below
# the 240 s pytest-timeout of tests/distributed/conftest.py.
PER_TEST_TIMEOUT = int(os.environ.get("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "180"))
# How ranks start. "spawn" is what PyTorch's runner does: each rank imports
# torch and this suite afresh (~3.5 s of CPU per rank). "forkserver" (default)
# forks each rank from a server process that imported them once: the same
# clean state (the server never runs a collective or touches a device), at a
# fraction of the cost.
START_METHOD = os.environ.get("OREG_SUITE_START_METHOD", "forkserver")
# What a rank needs from the test's environment (a forkserver child inherits
# the server's environment, not the test's).
RANK_ENV = ("BACKEND", "WORLD_SIZE", "TEMP_DIR", "INIT_METHOD", "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT")


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
        # Every feature set gloo is in: the suite then gates oreg_ccl like gloo
        # (no CUDA here, so the "gpu"/"cuda" tests skip or run on CPU alike).
        for feature in ("gpu", "cuda", "ddp", "subgroup", "plugin"):
            DistTestCases.backend_feature[feature].add(BACKEND)

    from torch.testing._internal.distributed import distributed_test
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
    "test_sparse_all_reduce_sum", "test_monitored_barrier_gloo_rank_0_timeout",
} | {f"test_all_reduce_coalesced{g}_{op}" for g in ("", "_group", "_full_group")
     for op in ("sum", "product", "min", "max")}
NAME_GATE_REASONS = {
    "Only gloo backend supports timeouts",
    "GLOO Batch Send Recv CPU",
    "Only Gloo backend supports sparse all reduce",
    "get_future is only supported on mpi, nccl and gloo",
}
# require_backend_is_available({"gloo"}) (its message prints a set).
NAME_GATE_PREFIX = f"Test requires backend {BACKEND} to be one of {{"


def lift_name_gates(cls):
    if BACKEND == "gloo":
        return
    for name in sorted(NAME_GATED):
        fn = getattr(cls, name, None)
        if fn is not None and getattr(fn, "__unittest_skip__", False) and \
                (fn.__unittest_skip_why__ in NAME_GATE_REASONS or
                 fn.__unittest_skip_why__.startswith(NAME_GATE_PREFIX)):
            fn.__unittest_skip__ = False


class PyTorchDistributedSuite(TestDistBackend, DistributedTest._DistTestBase):
    @property
    def world_size(self):
        return str(WORLD_SIZE)

    def setUp(self):
        # TestDistBackend.setUp creates the test's temp dir (TEMP_DIR, INIT_METHOD);
        # tearDown restores every variable.
        self._env = suite_environment(TEMP_DIR="", INIT_METHOD="")
        self._env.__enter__()
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
            self._env.__exit__(None, None, None)

    def processes_at_teardown(self):
        return list(getattr(self, "_spawned", []))

    def _spawn_processes(self):
        if START_METHOD == "spawn":
            return super()._spawn_processes()
        ctx = torch.multiprocessing.get_context(START_METHOD)
        # Takes effect when this worker's server starts (first test). The
        # server imports by name with its own sys.path (Python 3.11 does not
        # pass ours), hence this directory on its PYTHONPATH.
        ctx.set_forkserver_preload(["torch", __name__, type(self).__module__])
        path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
        with suite_environment(PYTHONPATH=path):
            self._start_processes(ctx.Process)

    def _start_processes(self, proc):
        # MultiProcessTestCase._start_processes, passing the test's environment.
        self.processes = []
        env = {k: os.environ[k] for k in RANK_ENV if k in os.environ}
        for rank in range(int(self.world_size)):
            parent_conn, child_conn = torch.multiprocessing.Pipe()
            process = proc(
                target=self.__class__._run,
                name=f"process {rank}",
                args=(rank, self._current_test_name(), self.file_name, child_conn),
                kwargs={"fake_pg": False, "suite_env": env},
            )
            process.start()
            self.pid_to_pipe[process.pid] = parent_conn
            self.processes.append(process)
        self._spawned = list(self.processes)

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, suite_env=None, **kwargs):
        os.environ.update(suite_env or {})
        # Read by distributed_test at import (a forked rank imported it earlier).
        distributed_test.INIT_METHOD = os.environ.get("INIT_METHOD", distributed_test.INIT_METHOD)
        super()._run(rank, test_name, file_name, pipe, **kwargs)


lift_name_gates(PyTorchDistributedSuite)
