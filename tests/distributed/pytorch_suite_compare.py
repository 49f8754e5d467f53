"""Runs PyTorch's distributed suite (tests/distributed/_pytorch_suite.py) for gloo
and for oreg_ccl and compares the outcomes test by test.

    PYTHONPATH=$PWD python tests/distributed/pytorch_suite_compare.py [--backends gloo oreg_ccl]
        [--workers 2] [--world-size 2] [-k EXPR] [--write-list]

Results (outcome, time, message per test) go to
tests/distributed/pytorch_suite/results_<backend>.json (results_<backend>_ws<N>.json
for another world size); the report lists every
test that passes for gloo but not for oreg_ccl, marking the ones in
pytorch_suite_exceptions.EXCEPTIONS. `--write-list` rewrites
tests/distributed/pytorch_suite/gloo_passing.txt (the tests CI runs for
oreg_ccl, see test_pytorch_suite.py) from the gloo results.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "pytorch_suite")
sys.path.insert(0, HERE)


def run(backend, workers, world_size, kexpr, timeout):
    xml = os.path.join(OUT, f"junit_{backend}.xml")
    cmd = [sys.executable, "-m", "pytest", os.path.join(HERE, "_pytorch_suite.py"), "-q",
           "-p", "no:cacheprovider", f"--junitxml={xml}", "-o", "junit_family=xunit1",
           "-rN", "--tb=line"]
    if workers > 1:
        cmd += ["-n", str(workers)]
    if kexpr:
        cmd += ["-k", kexpr]
    env = dict(os.environ, BACKEND=backend, WORLD_SIZE=str(world_size),
               DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(timeout))
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, cwd=os.path.dirname(os.path.dirname(HERE)))
    wall = time.monotonic() - t0
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "")[:300]
                break
        results[name] = {"outcome": outcome, "time": round(float(case.get("time") or 0), 2),
                         "message": message}
    os.remove(xml)
    with open(results_path(backend, world_size), "w") as f:
        json.dump({"backend": backend, "world_size": world_size, "wall_seconds": round(wall),
                   "tests": dict(sorted(results.items()))}, f, indent=1)
    return results


def results_path(backend, world_size):
    suffix = "" if world_size == 2 else f"_ws{world_size}"
    return os.path.join(OUT, f"results_{backend}{suffix}.json")


def load(backend, world_size=2):
    with open(results_path(backend, world_size)) as f:
        return json.load(f)["tests"]


def count(results):
    out = {}
    for r in results.values():
        out[r["outcome"]] = out.get(r["outcome"], 0) + 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["gloo", "oreg_ccl"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=200, help="per-test limit (seconds)")
    ap.add_argument("-k", dest="kexpr", default="")
    ap.add_argument("--gloo-passing-only", action="store_true",
                    help="run only the tests that passed for gloo (and the name-gated ones)")
    ap.add_argument("--report-only", action="store_true", help="compare the stored results")
    ap.add_argument("--write-list", action="store_true")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.gloo_passing_only:
        from _pytorch_suite import NAME_GATED

        names = {n for n, r in load("gloo", args.world_size).items()
                 if r["outcome"] == "passed"} | NAME_GATED
        args.kexpr = " or ".join(sorted(names))
    if not args.report_only:
        for b in args.backends:
            run(b, args.workers, args.world_size, args.kexpr, args.timeout)
    gloo, oreg = load("gloo", args.world_size), load("oreg_ccl", args.world_size)
    from pytorch_suite_exceptions import EXCEPTIONS

    print(f"gloo:     {count(gloo)}")
    print(f"oreg_ccl: {count(oreg)}")
    gloo_pass = sorted(n for n, r in gloo.items() if r["outcome"] == "passed")
    missing = [n for n in gloo_pass if oreg.get(n, {}).get("outcome") != "passed"]
    print(f"passing for gloo: {len(gloo_pass)}; of those not passing for oreg_ccl: {len(missing)}")
    for n in missing:
        r = oreg.get(n, {"outcome": "not run", "message": ""})
        tag = "exception" if n in EXCEPTIONS else "UNEXPECTED"
        print(f"  [{tag}] {n}: {r['outcome']} {r['message'][:160]}")
    extra = sorted(n for n, r in oreg.items() if r["outcome"] == "passed" and n not in gloo_pass)
    print(f"passing for oreg_ccl but not for gloo: {len(extra)}")
    for n in extra:
        print(f"  {n}: gloo {gloo.get(n, {}).get('outcome')} {gloo.get(n, {}).get('message', '')[:120]}")
    if args.write_list:
        assert args.world_size == 2, "CI runs the WORLD_SIZE=2 list"
        with open(os.path.join(OUT, "gloo_passing.txt"), "w") as f:
            f.write("# Tests of DistributedTest._DistTestBase that pass for gloo (WORLD_SIZE=2, CPU),\n"
                    "# written by tests/distributed/pytorch_suite_compare.py --write-list.\n")
            for n in gloo_pass:
                f.write(f"{n}\n")


if __name__ == "__main__":
    main()
