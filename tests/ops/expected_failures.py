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
    # Not an openreg bug: LinearCrossEntropyOptions._adjust resolves
    # acc_policy="auto" from a (device.type, dtype) table; openreg gets the
    # default policy while the CPU has its own entry, so bfloat16 accumulates
    # differently (last-bit differences). CUDA differs from the CPU the same way.
    "nn.functional.linear_cross_entropy.chunked_none@bfloat16":
        "acc_policy='auto' is chosen per device type, so bf16 accumulation differs from the CPU's",
}
