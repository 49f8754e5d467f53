"""Process-tree helpers the test harnesses share (pytest's process only)."""
import os


def descendants(pid: int) -> list[int]:
    """pid's descendants (children first found, recursively), via /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out
