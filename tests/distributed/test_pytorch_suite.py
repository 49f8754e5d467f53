"""PyTorch's distributed suite (`DistributedTest._DistTestBase`) against oreg_ccl.

Runs, for BACKEND=oreg_ccl at WORLD_SIZE=2, every test of the suite that passes
for gloo on this machine (pytorch_suite/gloo_passing.txt, written by
`pytorch_suite_compare.py --write-list`), minus the reviewed exceptions of
pytorch_suite_exceptions.EXCEPTIONS: 84 tests, about 25 s with two workers
(ranks start from a preloaded forkserver, see _pytorch_suite.START_METHOD).
conftest.py deselects the suite's other tests.

Each test starts two fresh ranks (MultiProcessTestCase); PyTorch's own limit
terminates them after _pytorch_suite.PER_TEST_TIMEOUT (180 s), pytest-timeout
stops the test after 240 s (conftest.py), teardown kills whatever is left, and
no oreg_ccl shared-memory object of the ranks may remain in /dev/shm.
"""
import os

import pytest

import _pytorch_suite
from _harness import shm_objects
from pytorch_suite_exceptions import EXCEPTIONS

LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_suite", "gloo_passing.txt")


def gloo_passing():
    with open(LIST) as f:
        return [line.split()[0] for line in f if line.strip() and not line.startswith("#")]


# Read by conftest.py: the tests of the class that run.
PYTORCH_SUITE_SELECTED = frozenset(n for n in gloo_passing() if n not in EXCEPTIONS)

if _pytorch_suite.BACKEND != "oreg_ccl":
    pytest.skip(f"BACKEND={_pytorch_suite.BACKEND} in the environment (this module runs oreg_ccl)",
                allow_module_level=True)


class TestPyTorchDistributedSuite(_pytorch_suite.PyTorchDistributedSuite):
    def tearDown(self):
        pids = [p.pid for p in self.processes_at_teardown()]
        super().tearDown()
        leaked = shm_objects(pids)
        assert not leaked, f"shared memory left behind: {leaked}"


def test_selection_is_complete():
    # Every gloo-passing test exists in this torch's suite, and every exception is one of them.
    names = set(gloo_passing())
    missing = sorted(n for n in names if not hasattr(TestPyTorchDistributedSuite, n))
    assert not missing, f"gloo_passing.txt names tests this torch does not have: {missing}"
    stale = sorted(set(EXCEPTIONS) - names)
    assert not stale, f"exceptions for tests that do not pass for gloo: {stale}"
    assert len(PYTORCH_SUITE_SELECTED) == len(names) - len(EXCEPTIONS)
