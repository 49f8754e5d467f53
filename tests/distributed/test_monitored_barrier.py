"""ProcessGroup.monitored_barrier on oreg_ccl: gloo's semantics and messages.

(torch.distributed.monitored_barrier() itself refuses every backend not named
gloo, so the process-group method is called directly.)
"""
import datetime
import time

import torch.distributed as dist

from _harness import spawn


def monitored(rank, n):
    pg = dist.new_group(list(range(n)))
    pg.monitored_barrier(datetime.timedelta(seconds=10))
    pg.monitored_barrier(datetime.timedelta(seconds=10), wait_all_ranks=True)

    # Rank n-1 never arrives: rank 0 names it, the others learn that rank 0
    # failed. (5 s: the others must arrive within it, on a busy runner too.)
    g = dist.new_group(list(range(n)))
    if rank == 0:
        start = time.monotonic()
        try:
            g.monitored_barrier(datetime.timedelta(seconds=5))
            raise AssertionError("monitored_barrier passed without rank n-1")
        except RuntimeError as e:
            assert f"Rank {n - 1} failed to pass monitoredBarrier in 5000 ms" in str(e), str(e)
            assert "frame #" not in str(e), str(e)  # the cause's text, not its C++ backtrace
        assert time.monotonic() - start < 15
    elif rank != n - 1:
        try:
            g.monitored_barrier(datetime.timedelta(seconds=5))
            raise AssertionError("monitored_barrier passed although rank 0 failed")
        except RuntimeError as e:
            assert f"Rank {rank} successfully reached monitoredBarrier" in str(e), str(e)
            assert "frame #" not in str(e), str(e)

    # wait_all_ranks: every missing rank is reported.
    g = dist.new_group(list(range(n)))
    if rank == 0:
        try:
            g.monitored_barrier(datetime.timedelta(milliseconds=300), wait_all_ranks=True)
            raise AssertionError("monitored_barrier passed without ranks 1..n-1")
        except RuntimeError as e:
            missing = ", ".join(str(r) for r in range(1, n))
            assert f"Ranks {missing} failed to pass monitoredBarrier" in str(e), str(e)
    dist.barrier()


def test_monitored_barrier(tmp_path):
    spawn(monitored, 3, tmp_path)
