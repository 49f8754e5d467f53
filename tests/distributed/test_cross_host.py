"""oreg_ccl across hosts: ranks on simulated hosts (OREG_CCL_HOST_ID) talk
over ZeroMQ on loopback between hosts and shared memory within a host.

The same checks as the single-host tests (every collective x op x dtype
against independently computed values; send/recv patterns), plus what only
the network path has: the wire protocol rejecting foreign or malformed
messages, a killed or hung rank on another host, abort() from another thread.
"""
import datetime
import os
import signal
import threading
import time

import pytest
import torch
import torch.distributed as dist

from _harness import spawn
from test_collectives import matrix
from test_errors import expect_dist_error
from test_p2p import p2p


@pytest.mark.parametrize(
    "hosts,chunk",
    [
        ((0, 0, 1, 1), None),  # 2 hosts x 2 ranks: hierarchical algorithms
        ((0, 1, 2), 4096),     # 3 hosts x 1 rank, tiny chunks: many chunks per message
        ((0, 0, 1), None),     # uneven hosts: leader-based allreduce
    ],
    ids=["2x2", "3x1-chunked", "2+1"],
)
def test_every_collective_across_hosts(tmp_path, hosts, chunk):
    env = {"OREG_CCL_ZMQ_CHUNK_BYTES": str(chunk)} if chunk else {}
    spawn(matrix, len(hosts), tmp_path, timeout=220, host_of=hosts, env=env)


def p2p_across_hosts(rank, n):
    p2p(rank, n, any_source=False)
    # Like NCCL: no receive from any source when the group spans hosts.
    with pytest.raises(RuntimeError, match="any source"):
        dist.recv(torch.empty(2))


def test_send_recv_across_hosts(tmp_path):
    spawn(p2p_across_hosts, 3, tmp_path, host_of=(0, 0, 1))
