"""Who holds OpenMP threads (csrc/aten/OpenMPThreads.cpp): libgomp stops spinning
between parallel regions once a process holds more OpenMP threads than cores, so
the host thread and a stream worker must not both keep a team. Counted by thread
names: a team's threads take the name of the thread that started it."""

# Prepended to each test's script: thread counts by name, and waiting for one.
_COUNTING = """
        import os, time

        def named(name):
            count = 0
            for t in os.listdir("/proc/self/task"):
                try:
                    count += open(f"/proc/self/task/{t}/comm").read().strip() == name
                except FileNotFoundError:  # the thread exited after the listing
                    pass
            return count

        def eventually(cond, timeout=10.0):
            end = time.monotonic() + timeout
            while not cond() and time.monotonic() < end:
                time.sleep(0.01)
            return cond()
"""



def test_launching_thread_and_idle_worker_release_their_teams(python):
    r = python(_COUNTING + """
        import torch, openreg

        host = open("/proc/self/comm").read().strip()
        before = named(host)
        a = torch.randn(1 << 20)
        (a + 1).sum()
        assert named(host) == before + 1, "the host's CPU op started no OpenMP team"

        x = a.to("openreg")  # a blocking copy to an idle stream: the host copies
        y = (x * 2).sum()    # a launch: the host gives its team up
        assert named(host) == before, "the launching thread kept its OpenMP team"
        # Queue work for seconds: the worker is busy (not idle) while its team is counted.
        busy = [x * 3 for _ in range(20)] + [torch.openreg._sleep(3000)]
        assert eventually(lambda: named("oreg_stream_0") == 2), "the kernels ran without a team"
        torch.openreg.synchronize()
        assert eventually(lambda: named("oreg_stream_0") == 1), "the idle worker kept its team"

        # Teams restart on demand, and results stay right.
        assert torch.allclose(y.cpu(), a.sum() * 2)
        assert torch.allclose((x + 1).cpu(), a + 1)
        print("ok")
    """, env={"OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_dispatch_probes_start_no_team(python):
    # Probes run CPU kernels on tiny tensors on the host (layer_norm's opens a
    # parallel region at any size): they must not leave the host a team.
    r = python(_COUNTING + """
        import torch, openreg

        host = open("/proc/self/comm").read().strip()
        before = named(host)
        x = torch.randn(4, 8, device="openreg")
        torch.nn.functional.layer_norm(x, (8,)).cpu()
        torch.nn.functional.gelu(x).cpu()
        print(named(host) - before)
    """, env={"OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


def test_forked_child_launches_without_waiting_for_the_parents_team(python):
    # A fork's child inherits its thread's OpenMP pool without the pool's
    # threads: releasing that team there would wait for them forever.
    r = python(_COUNTING + """
        import torch, openreg
        a = torch.randn(1 << 20)
        (a + 1).sum()          # the host has a team; openreg is not initialised yet
        time.sleep(0.2)        # past the launch-release interval
        pid = os.fork()
        if pid == 0:
            x = torch.ones(1 << 20, device="openreg")
            if (x * 2).sum().item() != 2 * (1 << 20):
                os._exit(3)
            # The child's own worker still gives its team up when idle.
            os._exit(0 if eventually(lambda: named("oreg_stream_0") == 1) else 4)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """, env={"OMP_NUM_THREADS": "2"}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


def test_probes_keep_the_threads_torch_set_num_threads_gave(python):
    # A probe can be a thread's first ATen parallel region, where PyTorch
    # applies torch.set_num_threads to the thread: that setting must survive it.
    r = python("""
        import threading, torch, openreg
        torch.set_num_threads(1)
        x = torch.randn(64, 256, device="openreg")
        seen = []
        def first_op_is_probed():
            torch.nn.functional.layer_norm(x, (256,))
            seen.append(torch.get_num_threads())
        t = threading.Thread(target=first_op_is_probed)
        t.start(); t.join()
        print(seen)
    """, env={"OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[1]"
