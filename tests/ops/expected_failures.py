"""The one reviewed list of known openreg-vs-CPU differences in tests/ops.

OPINFO maps an OpInfo id ("name" or "name.variant", as test_opinfo.py prints
it) or "id@dtype" to the reason it fails. Entries are strict xfails: once
fixed, the test fails until the entry is removed.
"""

_NO_SPARSE = ("openreg implements strided tensors only: building the sparse (COO/CSR) sample "
              "on openreg fails with 'Cannot access storage of Sparse...TensorImpl' "
              "(no SparsePrivateUse1 / SparseCsrPrivateUse1 kernels)")

OPINFO = {
    "sparse.sampled_addmm": _NO_SPARSE,
    "sparse.mm.reduce": _NO_SPARSE,
    "to_sparse": _NO_SPARSE,
}

# AMP maps "op@list" (an entry of torch.testing._internal.autocast_test_lists)
# to the reason it cannot pass on openreg.
_CUDNN_ONLY = ("cuDNN-only operator: no CPU kernel exists to run it, so it raises on openreg "
               "(and on the CPU); autocast does register its CUDA cast rule for it")
AMP = {
    "cudnn_convolution@torch_fp16": _CUDNN_ONLY,
    "cudnn_convolution_transpose@torch_fp16": _CUDNN_ONLY,
    "einsum@torch_fp16": ("the list's einsum entry is malformed (a 4-subscript equation for 2-D "
                          "operands, so einsum raises on every device); test_cuda.py never runs "
                          "it because it reads the entry's third field as a skip flag"),
}

# MODULES maps a ModuleInfo's formatted_name to the reason it fails.
MODULES = {}

# ERROR_INPUTS: OpInfo error inputs ("op[index]") that openreg accepts or
# answers with another error. ERROR_INPUTS_ASYNC: error inputs whose error
# openreg raises inside the kernel (a check in the CPU kernel that the Meta
# kernel does not make): the message is the CPU's, but it arrives at the next
# synchronising call and leaves the stream failed, like a CUDA device-side
# assert, where CUDA raises on the host. Not run (they would fail every later
# test in the worker).
_OVERLAP = ("out= overlapping an input: the async path allocates from Meta, and the Python Meta "
            "kernel does not make the CPU kernel's memory-overlap check, so the op runs")
ERROR_INPUTS = {
    "gather[5]": _OVERLAP, "gather[6]": _OVERLAP, "index_select[0]": _OVERLAP,
    "masked_select[1]": _OVERLAP, "masked_select[2]": _OVERLAP, "take[1]": _OVERLAP,
    "kthvalue[0]": ("out= values/indices overlapping: the synchronous path's host copies of the "
                    "outputs hide the overlap from the CPU kernel"),
}
ERROR_INPUTS_ASYNC = {
    "bernoulli[0]": "out= overlapping the input: the CPU kernel's check, not Meta's",
}
