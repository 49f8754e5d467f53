#include "Staging.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>

#include "../runtime/driver/Driver.h"

#include <ATen/ops/empty.h>

#include "../aten/Launch.h"

namespace openreg::ccl {

void checkTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK_VALUE(t.defined(), "oreg_ccl: ", op, ": undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == c10::kStrided, "oreg_ccl: ", op,
                    " supports dense (strided) tensors only, got ", t.layout());
  TORCH_CHECK_VALUE(t.device().is_cpu() || isOpenReg(t), "oreg_ccl: ", op,
                    " supports cpu and openreg tensors, got a tensor on ", t.device());
}

void checkWritable(const std::vector<at::Tensor>& ts, const char* op) {
  for (const auto& t : ts)
    TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "oreg_ccl: ", op,
                ": unsupported operation: more than one element of the written-to tensor "
                "refers to a single memory location (", describe(t), ", strides ", t.strides(),
                "). Please clone() the tensor before performing the operation.");
}

at::Tensor checkSingle(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "oreg_ccl: ", op,
                    " expects exactly one tensor per process, got ", tensors.size());
  checkTensor(tensors[0], op);
  return tensors[0];
}

void checkSameDevice(const at::Tensor& ref, const std::vector<at::Tensor>& ts, const char* op) {
  for (const auto& t : ts) {
    checkTensor(t, op);
    TORCH_CHECK_VALUE(t.device() == ref.device(), "oreg_ccl: ", op,
                      ": all tensors must be on one device, got ", ref.device(), " and ",
                      t.device());
  }
}

void checkSameType(const at::Tensor& ref, const std::vector<at::Tensor>& ts, const char* op) {
  checkSameDevice(ref, ts, op);
  for (const auto& t : ts)
    TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), "oreg_ccl: ", op,
                      ": dtype mismatch, expected ", ref.scalar_type(), " got ", t.scalar_type());
}

void checkSameTypeAndSize(const at::Tensor& ref, const std::vector<at::Tensor>& ts,
                          const char* op) {
  checkSameType(ref, ts, op);
  for (const auto& t : ts)
    TORCH_CHECK_VALUE(t.numel() == ref.numel(), "oreg_ccl: ", op, ": size mismatch, expected ",
                      ref.numel(), " elements got ", t.numel());
}

std::string describe(const at::Tensor& t) {
  // Count and dtype, not shape: as with NCCL and gloo, ranks may pass tensors
  // of different shapes with equal element counts.
  return c10::str(t.numel(), " x ", t.scalar_type());
}

c10::ScalarType stageDtype(c10::ScalarType dtype) {
  return (dtype == c10::kHalf || dtype == c10::kBFloat16) ? c10::kFloat : dtype;
}

ReduceSpec reduceSpec(const c10d::ReduceOp& op, const at::Tensor& reduced, const char* what) {
  const c10::ScalarType dtype = reduced.scalar_type();
  ReduceSpec s;
  const bool floating = c10::isFloatingType(dtype) || c10::isComplexType(dtype);
  switch (op.op_) {
    case c10d::ReduceOp::SUM: s.kind = ReduceKind::kSum; s.name = "SUM"; break;
    case c10d::ReduceOp::AVG:
      s.kind = ReduceKind::kSum;
      s.average = true;
      s.name = "AVG";
      TORCH_CHECK_VALUE(dtype != c10::kBool, "oreg_ccl: ", what, ": AVG is not defined for bool");
      break;
    case c10d::ReduceOp::PRODUCT: s.kind = ReduceKind::kProduct; s.name = "PRODUCT"; break;
    case c10d::ReduceOp::MIN: s.kind = ReduceKind::kMin; s.name = "MIN"; break;
    case c10d::ReduceOp::MAX: s.kind = ReduceKind::kMax; s.name = "MAX"; break;
    case c10d::ReduceOp::BAND: s.kind = ReduceKind::kBand; s.name = "BAND"; break;
    case c10d::ReduceOp::BOR: s.kind = ReduceKind::kBor; s.name = "BOR"; break;
    case c10d::ReduceOp::BXOR: s.kind = ReduceKind::kBxor; s.name = "BXOR"; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      s.kind = ReduceKind::kSum;
      s.premul = true;
      s.name = "PREMUL_SUM";
      TORCH_CHECK_VALUE(floating, "oreg_ccl: ", what, ": PREMUL_SUM needs a floating dtype, got ",
                        dtype);
      auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(sup, "oreg_ccl: ", what, ": PREMUL_SUM without a factor");
      if (sup->tensor_factor.defined()) {
        checkTensor(sup->tensor_factor, what);
        TORCH_CHECK_VALUE(sup->tensor_factor.numel() == 1, "oreg_ccl: ", what,
                          ": the PREMUL_SUM factor must have one element");
        // The worker reads the factor as a double: a complex one would fail
        // the whole group there instead of this call; NCCL's factor is of the
        // reduced (floating) dtype, so an integer or bool one is refused too.
        TORCH_CHECK_VALUE(c10::isFloatingType(sup->tensor_factor.scalar_type()), "oreg_ccl: ",
                          what, ": the PREMUL_SUM factor must be a floating tensor, got ",
                          sup->tensor_factor.scalar_type());
        // On another device, the operation would be ordered (and waited for)
        // on the wrong one: the factor's stream, not the reduced tensor's.
        TORCH_CHECK_VALUE(sup->tensor_factor.device() == reduced.device(), "oreg_ccl: ", what,
                          ": the PREMUL_SUM factor is on ", sup->tensor_factor.device(),
                          " but the reduced tensor is on ", reduced.device());
        s.factorTensor = sup->tensor_factor;
      } else {
        s.factor = sup->double_factor;
      }
      break;
    }
    default: TORCH_CHECK_VALUE(false, "oreg_ccl: ", what, ": unsupported reduce op ", int(op.op_));
  }
  if (c10::isComplexType(dtype))
    TORCH_CHECK_VALUE(s.kind == ReduceKind::kSum, "oreg_ccl: ", what, ": ", s.name,
                      " is not defined for complex tensors");
  c10::ScalarType real = c10::toRealValueType(stageDtype(dtype));
  TORCH_CHECK_VALUE(reduceSupported(real, s.kind), "oreg_ccl: ", what, ": ", s.name,
                    " is not supported for ", dtype);
  return s;
}

// CPU tensors as they are: the collective writes them (kernelView would copy them).
at::Tensor forWorker(const at::Tensor& t) { return isOpenReg(t) ? kernelView(t) : t; }

std::vector<at::Tensor> forWorker(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(forWorker(t));
  return out;
}

std::vector<std::vector<at::Tensor>> forWorker(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(lists.size());
  for (const auto& l : lists) out.push_back(forWorker(l));
  return out;
}

ReduceSpec forWorker(ReduceSpec spec) {
  if (spec.factorTensor.defined()) spec.factorTensor = forWorker(spec.factorTensor);
  return spec;
}

std::vector<ReduceSpec> forWorker(std::vector<ReduceSpec> specs) {
  for (auto& s : specs) s = forWorker(std::move(s));
  return specs;
}

at::Tensor hostView(const at::Tensor& t) {
  // Bodies hold forWorker() aliases: an openreg tensor here would be read at
  // its current address, not the one it had when the operation was issued.
  TORCH_INTERNAL_ASSERT(!isOpenReg(t), "oreg_ccl: an operation body holds an openreg tensor");
  // A fresh TensorImpl over the same storage rather than `t` itself: the
  // worker may drop the last reference to it, and dropping a tensor that
  // has a Python object would need the GIL.
  return tensorOver(t.storage(), t, c10::DispatchKey::CPU);
}

Staged stage(const at::Tensor& t, c10::ScalarType dtype, bool load, bool forceCopy) {
  at::Tensor v = hostView(t);
  if (!forceCopy && v.scalar_type() == dtype && v.is_contiguous()) return {v, v, false};
  at::Tensor b = at::empty(v.sizes(), v.options().dtype(dtype));
  if (load && v.numel()) b.copy_(v);
  return {v, b, true};
}

void unstage(Staged& s) {
  if (s.copied && s.view.numel()) s.view.copy_(s.buf);
}

size_t reduceCount(const at::Tensor& buf) {
  return static_cast<size_t>(buf.numel()) * (buf.is_complex() ? 2 : 1);
}

c10::ScalarType reduceDtype(const at::Tensor& buf) { return c10::toRealValueType(buf.scalar_type()); }

void preReduce(const ReduceSpec& spec, at::Tensor& buf) {
  if (!spec.premul) return;
  double f = spec.factorTensor.defined() ? hostView(spec.factorTensor).item().toDouble() : spec.factor;
  buf.mul_(f);
}

namespace {
constexpr int64_t kGrain = 32768;  // at::internal::GRAIN_SIZE, without TensorIterator.h
// ATen has no division kernels for the barebones unsigned types.
template <typename T>
void divideInPlace(at::Tensor& buf, int divisor) {
  T* p = buf.data_ptr<T>();
  at::parallel_for(0, buf.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
  });
}
}  // namespace

void postReduce(const ReduceSpec& spec, at::Tensor& buf, int groupSize) {
  if (!spec.average) return;
  switch (buf.scalar_type()) {
    case c10::kUInt16: return divideInPlace<uint16_t>(buf, groupSize);
    case c10::kUInt32: return divideInPlace<uint32_t>(buf, groupSize);
    case c10::kUInt64: return divideInPlace<uint64_t>(buf, groupSize);
    default: break;
  }
  if (c10::isIntegralType(buf.scalar_type(), /*includeBool=*/false))
    buf.div_(groupSize, "trunc");
  else
    buf.div_(groupSize);
}

}  // namespace openreg::ccl
