"""The basic ATen surface of issue 2: factories, copies, views, set_, resize_, fill_,
item and printing (csrc/aten/Factories.cpp, Copy.cpp, TensorShape.cpp, Scalar.cpp)."""
import pytest
import torch


def test_factories():
    assert torch.equal(torch.zeros(2, 3, device="openreg").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(4, device="openreg", dtype=torch.int64).cpu(), torch.ones(4, dtype=torch.int64))
    assert torch.equal(torch.full((3,), 2.5, device="openreg").cpu(), torch.full((3,), 2.5))
    assert torch.equal(torch.arange(10, device="openreg").cpu(), torch.arange(10))
    e = torch.empty_strided((2, 3), (1, 2), device="openreg")
    assert e.stride() == (1, 2) and e.device.type == "openreg"


def test_copies_all_directions():
    x = torch.randn(5, 7)
    d0 = x.to("openreg:0")
    d1 = d0.to("openreg:1")
    assert d1.device == torch.device("openreg:1")
    assert torch.equal(d1.cpu(), x)
    assert torch.equal(d0.to(torch.float64).cpu(), x.double())
    t = x.t().to("openreg")
    assert torch.equal(t.cpu(), x.t())


def test_views_and_as_strided():
    x = torch.arange(12.0).to("openreg")
    v = x.view(3, 4)
    assert v.data_ptr() == x.data_ptr()
    assert torch.equal(v.t().contiguous().cpu(), torch.arange(12.0).view(3, 4).t().contiguous())
    s = x.as_strided((2, 2), (4, 1), 1)
    assert torch.equal(s.cpu(), torch.arange(12.0).as_strided((2, 2), (4, 1), 1))
    v[1].fill_(0)
    assert x.cpu()[4:8].eq(0).all()


def test_set_and_resize():
    x = torch.arange(6.0).to("openreg")
    y = torch.empty(0, device="openreg")
    y.set_(x.untyped_storage(), 2, (2, 2), (2, 1))
    assert torch.equal(y.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    z = torch.empty(2, device="openreg")
    z.resize_(100)
    z.fill_(1)
    assert z.sum().item() == 100


def test_a_tensor_whose_storage_was_resized_away_raises_instead_of_crashing():
    # FSDP frees parameters with storage().resize_(0); a kernel or copy on the
    # tensor then would read no memory (CUDA: an illegal memory access; the
    # process crashed here before).
    x = torch.ones(4, device="openreg")
    x.untyped_storage().resize_(0)
    for use in (lambda: x.cpu(), lambda: x + 1, lambda: x.to("openreg:1"), lambda: x.fill_(2)):
        with pytest.raises(RuntimeError, match=r"spans 16 bytes of its storage, which holds only 0"):
            use()
    x.untyped_storage().resize_(16)  # given memory again, as FSDP's all-gather does
    x.fill_(3)
    assert x.sum().item() == 12


def test_fill_item_and_print():
    x = torch.empty(3, device="openreg").fill_(4)
    assert x[1].item() == 4.0
    assert "device='openreg:0'" in repr(x)
    assert "4." in str(x)
