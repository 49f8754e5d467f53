"""``openreg-run``: launch the GPT training job (launch/train.py) on simulated devices.

    openreg-run                       # DDP on 4 openreg devices, ~1 minute
    openreg-run --devices 8 --strategy fsdp2 --bf16
    openreg-run --devices 4 --strategy tp --steps 100

A thin layer over torchrun (``torch.distributed.run --standalone``): every option
other than --devices is passed to the training script (see ``launch/train.py --help``).
"""
import argparse
import os
import sys


def _train_script() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "launch", "train.py")
    if not os.path.exists(script):
        raise SystemExit(f"openreg-run: {script} not found; install openreg from its source "
                         "checkout (pip install --no-build-isolation -e .)")
    return script


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="openreg-run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=4, help="processes = simulated devices")
    args, train_args = parser.parse_known_args(argv)
    if args.devices < 1:
        parser.error("--devices must be at least 1")
    env = os.environ
    if int(env.get("OPENREG_DEVICE_COUNT", "8")) < args.devices:
        env["OPENREG_DEVICE_COUNT"] = str(args.devices)
    from torch.distributed.run import main as torchrun
    torchrun(["--standalone", f"--nproc-per-node={args.devices}", _train_script(), *train_args])


if __name__ == "__main__":
    main(sys.argv[1:])
