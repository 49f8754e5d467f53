"""oreg_ccl between two real network namespaces: `torchrun --nnodes=2`.

The test creates two network namespaces joined by a veth pair (names and a /30
subnet derived from the pid, so parallel pytest-xdist workers never clash) and
runs one torchrun agent in each (2 workers per node, static rendezvous on
ns0's veth address). Each namespace is a host for oreg_ccl (the host identity
includes the network namespace), so ranks 0,1 talk to ranks 2,3 over ZeroMQ
through the veth and within a node through shared memory.

The workers (this file run as a script) check every kind of collective and
cross-node send/recv against values computed locally from seeds, and that the
backend really saw two hosts: its topology (backend._hosts: ranks 0,1 | 2,3)
and the ZeroMQ endpoints it published in the store (each on its node's veth
address). From outside, the test checks that the veth carried at least the
bytes the large all_reduce must move between the hosts, and that nothing is
left in /dev/shm. Needs root and iproute2 (CI: scripts/setup.sh); fails
rather than skips otherwise.
"""
import datetime
import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _torchrun import pids_in, tail, torchrun_cmd, wait_all, worker_env  # noqa: E402

NODES, PER_NODE = 2, 2
BIG = 4 << 20  # floats: a 16 MiB all_reduce


# ---------------------------------------------------------------- worker side


def _data(rank, numel, salt):
    import torch

    g = torch.Generator().manual_seed(1000 * salt + rank)
    # Integer-valued floats: sums are exact in any order.
    return torch.randint(-1000, 1000, (numel,), generator=g).float()


def _worker(out_dir):
    import torch
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    node = int(os.environ["GROUP_RANK"])
    with open(os.path.join(out_dir, f"pid.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    dev = torch.device("openreg", local)
    torch.openreg.set_device(dev)
    dist.init_process_group("oreg_ccl", device_id=dev, timeout=datetime.timedelta(seconds=60))
    n = dist.get_world_size()
    assert n == NODES * PER_NODE

    def data(r, numel, salt):
        return _data(r, numel, salt)

    # all_reduce: one-shot (small), reduce-scatter + all-gather (large), MAX.
    for numel, salt in ((33, 1), (BIG, 2)):
        t = data(rank, numel, salt).to(dev)
        dist.all_reduce(t)
        assert torch.equal(t.cpu(), sum(data(r, numel, salt) for r in range(n))), numel
    t = data(rank, 1000, 3).to(dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert torch.equal(t.cpu(), torch.stack([data(r, 1000, 3) for r in range(n)]).amax(0))

    # broadcast from a rank of each node.
    for src in (0, 3):
        t = data(rank, 100_000, 4 + src).to(dev)
        dist.broadcast(t, src=src)
        assert torch.equal(t.cpu(), data(src, 100_000, 4 + src)), src

    # all_gather (list and into one tensor).
    outs = [torch.empty(257, device=dev) for _ in range(n)]
    dist.all_gather(outs, data(rank, 257, 10).to(dev))
    for r in range(n):
        assert torch.equal(outs[r].cpu(), data(r, 257, 10)), r
    flat = torch.empty(n * 5000, device=dev)
    dist.all_gather_into_tensor(flat, data(rank, 5000, 11).to(dev))
    assert torch.equal(flat.cpu(), torch.cat([data(r, 5000, 11) for r in range(n)]))

    # reduce_scatter.
    chunk = 20_000
    out = torch.empty(chunk, device=dev)
    dist.reduce_scatter_tensor(out, data(rank, n * chunk, 12).to(dev))
    full = sum(data(r, n * chunk, 12) for r in range(n))
    assert torch.equal(out.cpu(), full[rank * chunk:(rank + 1) * chunk])

    # all_to_all.
    chunk = 3000
    out = torch.empty(n * chunk, device=dev)
    dist.all_to_all_single(out, data(rank, n * chunk, 13).to(dev))
    want = torch.cat([data(r, n * chunk, 13)[rank * chunk:(rank + 1) * chunk] for r in range(n)])
    assert torch.equal(out.cpu(), want)

    # send/recv to the same local rank on the other node, both directions, in
    # order (blocking) and at once (batch_isend_irecv); 1.2 MB: many chunks.
    peer = (rank + PER_NODE) % n
    mine, theirs = data(rank, 300_000, 14), data(peer, 300_000, 14)
    got = torch.empty(300_000, device=dev)
    if node == 0:
        dist.send(mine.to(dev), peer)
        dist.recv(got, peer)
    else:
        dist.recv(got, peer)
        dist.send(mine.to(dev), peer)
    assert torch.equal(got.cpu(), theirs)
    got = torch.empty(300_000, device=dev)
    ops = [dist.P2POp(dist.isend, mine.to(dev), peer), dist.P2POp(dist.irecv, got, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(got.cpu(), theirs)
    dist.barrier()

    # The backend's own view: two hosts (ranks 0,1 | 2,3), so ZeroMQ between
    # them; and the ZeroMQ endpoint each rank published in the group's store
    # is on its node's veth address.
    backend = dist.group.WORLD._get_backend(dev)
    assert backend._hosts == [[0, 1], [2, 3]], backend._hosts
    _, group_store = dist.distributed_c10d._world.pg_map[dist.group.WORLD]
    # (c10d hands a backend the group's store under "<device type>/" of the
    # first device type it serves: a group holds one custom backend, created
    # for "cpu" and used for openreg too.)
    stores = [dist.PrefixStore(f"{d}/", group_store) for d in ("cpu", "openreg")]
    key = backend._store_prefix + "zmq/endpoint/"
    stores = [s for s in stores if s.check([key + "0"])]
    assert stores, "oreg_ccl published no ZeroMQ endpoints in the group's store"
    addrs = json.loads(os.environ["OREG_TEST_ADDRS"])
    for r in range(n):
        ep = stores[0].get(key + str(r)).decode()
        assert ep.startswith(f"tcp://{addrs[r // PER_NODE]}:"), (r, ep, addrs)

    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"ok.{rank}"), "w") as f:
        f.write("ok")


# ------------------------------------------------------------------ test side


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _require_netns():
    if os.geteuid() != 0:
        pytest.fail("test_netns_torchrun needs root (it creates network namespaces); "
                    "CI runs the tests as root")
    if shutil.which("ip") is None:
        pytest.fail("test_netns_torchrun needs `ip` from iproute2 (scripts/setup.sh installs it)")
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.fail(f"`ip netns` is unavailable: {r.stderr.strip()}")


def _netns_pids(ns):
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def _tx_bytes(ns, dev):
    stats = json.loads(_ip("-n", ns, "-j", "-s", "link", "show", "dev", dev).stdout)[0]
    s = stats.get("stats64") or stats["stats"]
    return s["tx"]["bytes"]


@pytest.mark.timeout(240)
def test_torchrun_two_network_namespaces(tmp_path):
    _require_netns()
    pid = os.getpid()
    ns = [f"oreg-ccl-{pid}-{i}" for i in range(NODES)]
    veth = [f"orv{pid:x}{'ab'[i]}" for i in range(NODES)]  # <= 15 characters
    n = pid & 0x3FFFFF  # pid_max <= 2^22: a 10.a.b.c/30 of its own per pid
    net = f"10.{n >> 14}.{(n >> 6) & 0xFF}.{(n & 0x3F) << 2}"
    base = net.rsplit(".", 1)
    addrs = [f"{base[0]}.{int(base[1]) + 1 + i}" for i in range(NODES)]

    procs = {}
    try:
        for name in ns:  # left over by a killed run that had our pid
            if os.path.exists(f"/run/netns/{name}"):
                _ip("netns", "del", name, check=False)
        for name in ns:
            _ip("netns", "add", name)
        _ip("link", "add", veth[0], "netns", ns[0], "type", "veth", "peer", "name", veth[1],
            "netns", ns[1])
        for i in range(NODES):
            _ip("-n", ns[i], "addr", "add", f"{addrs[i]}/30", "dev", veth[i])
            _ip("-n", ns[i], "link", "set", veth[i], "up")
            _ip("-n", ns[i], "link", "set", "lo", "up")
        # Nothing listens in a fresh namespace; still, ask ns0 for a free port.
        port = subprocess.run(
            ["ip", "netns", "exec", ns[0], sys.executable, "-c",
             f"import socket; s = socket.socket(); s.bind(({addrs[0]!r}, 0)); "
             "print(s.getsockname()[1])"],
            capture_output=True, text=True, timeout=30, check=True).stdout.strip()

        env = worker_env(OREG_TEST_ADDRS=json.dumps(addrs))
        for i in range(NODES):
            cmd = ["ip", "netns", "exec", ns[i]] + torchrun_cmd(
                f"--nnodes={NODES}", f"--node-rank={i}", f"--nproc-per-node={PER_NODE}",
                "--rdzv-backend=static", f"--master-addr={addrs[0]}", f"--master-port={port}",
                "--max-restarts=0", os.path.abspath(__file__), tmp_path)
            log = open(tmp_path / f"node{i}.log", "w")
            procs[i] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=tmp_path)
            log.close()
        hung = wait_all(procs, timeout=180)
        logs = "".join(f"\n--- node {i} ---\n{tail(tmp_path / f'node{i}.log')}" for i in procs)
        logs += "".join(f"\n--- {e.name} ---\n{e.read_text()}" for e in tmp_path.glob("error.*"))
        assert not hung, f"nodes {hung} still running after 180 s (killed){logs}"
        codes = [procs[i].returncode for i in range(NODES)]
        assert codes == [0] * NODES, f"torchrun exit codes {codes}{logs}"
        ok = sorted(p.name for p in tmp_path.glob("ok.*"))
        assert ok == [f"ok.{r}" for r in range(NODES * PER_NODE)], f"{ok}{logs}"
        # The 16 MiB all_reduce alone moves >= half the vector each way
        # between the hosts (reduce-scatter + all-gather across them).
        for i in range(NODES):
            tx = _tx_bytes(ns[i], veth[i])
            assert tx > BIG * 4 // 2, f"{veth[i]} in {ns[i]} sent only {tx} bytes"
    finally:
        for i, p in procs.items():
            if p.poll() is None:
                p.kill()
        for name in ns:
            for p in _netns_pids(name):
                try:
                    os.kill(p, 9)
                except ProcessLookupError:
                    pass
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for name in ns:
            _ip("netns", "del", name, check=False)  # also destroys the veth pair

    from _harness import shm_objects

    leaked = shm_objects(pids_in(tmp_path))
    assert not leaked, f"shared memory left behind: {leaked}"


if __name__ == "__main__":
    try:
        _worker(sys.argv[1])
    except BaseException:
        import traceback

        with open(os.path.join(sys.argv[1], f"error.{os.environ.get('RANK')}"), "w") as f:
            f.write(traceback.format_exc())
        raise
