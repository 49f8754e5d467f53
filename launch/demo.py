"""Trains a tiny MLP on a simulated openreg device and prints memory statistics.

The stand-in main job until the multi-process training launcher lands
(see README, "Status").
"""
import argparse
import time

import torch
import torch.nn as nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="openreg:0")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # A fixed synthetic task: classify by the sign pattern of the first features.
    x = torch.randn(1024, 64)
    y = (x[:, :4] > 0).long().sum(1) % 10
    x, y = x.to(device), y.to(device)

    start = time.perf_counter()
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    torch.openreg.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f}s on {device}")
    print(torch.openreg.memory_summary(device))


if __name__ == "__main__":
    main()
