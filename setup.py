# Builds openreg._C against the installed torch (pip install --no-build-isolation -e .).
# torch's own pybind11 headers are used (never the pip pybind11 package).
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIRS = ["csrc/runtime/driver", "csrc/runtime", "csrc/aten", "csrc/python", "csrc/c10d", "csrc/c10d/shm", "csrc/c10d/zmq"]


def sources():
    files = []
    for d in SOURCE_DIRS:
        files += sorted(glob.glob(os.path.join(d, "*.cpp")))
    return files


setup(
    ext_modules=[
        CppExtension(
            name="openreg._C",
            sources=sources(),
            include_dirs=[os.path.join(ROOT, "csrc")],
            # The system libzmq (Debian's libzmq3-dev, installed by scripts/setup.sh).
            libraries=["zmq"],
            extra_compile_args=["-O2", "-g0", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
