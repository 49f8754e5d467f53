"""What Inductor's FX graph cache keys on for openreg: a digest of this
package's code generators. A cached graph is generated Python that calls
``kernels.build`` and the wrapper code as they were, so a change to them
must miss the cache. Inductor hashes a backend's ``device_custom_config``
(a config module) into every key (``register_backend_for_device``).
"""
import hashlib
import os
import sys

from torch.utils._config_module import install_config_module


def _digest_of_sources() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


codegen_sources: str = _digest_of_sources()

install_config_module(sys.modules[__name__])
