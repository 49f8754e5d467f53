#include "DispatchProbe.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <iterator>

namespace openreg::dispatch_probe {

at::Tensor probeTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  std::vector<int64_t> sizes(t.dim()), stored(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    sizes[d] = t.size(d) == 1 ? 1 : 2;
    stored[d] = t.stride(d) == 0 ? 1 : sizes[d];
  }
  at::Tensor probe = at::zeros(stored, at::TensorOptions().dtype(t.scalar_type()));
  if (stored != sizes) probe = probe.expand(sizes);
  // A Python number's tensor promotes with a lower rank than a 0-dim tensor.
  if (t.unsafeGetTensorImpl()->is_wrapped_number())
    probe.unsafeGetTensorImpl()->set_wrapped_number(true);
  return probe;
}

char scalarValueClass(const c10::Scalar& s) {
  if (s.isSymbolic()) return 's';
  if (s.isBoolean()) return s.toBool() ? 't' : 'f';
  if (s.isComplex()) return 'c';
  const double v = s.toDouble();
  if (std::isnan(v)) return 'N';
  if (std::isinf(v)) return v > 0 ? 'I' : 'i';
  constexpr double kSpecial[] = {0, 1, 2, 3, -1, -2, -3, 0.5, -0.5};
  for (size_t i = 0; i < std::size(kSpecial); ++i)
    if (v == kSpecial[i]) return static_cast<char>('a' + i);
  return 'o';
}

at::Tensor probeOutput(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty({0}, at::TensorOptions().dtype(t.scalar_type()));
}

namespace {

// The probe's warnings (an out= resize, a deprecation) are not the user's call's.
class DropWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

std::optional<Rejection> runProbe(const std::function<void()>& probe) {
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard silence(&drop);
  try {
    probe();
  } catch (const c10::NotImplementedError& e) {
    return Rejection{true, e.msg()};
  } catch (const c10::Error& e) {
    // TensorBase::data_ptr<T>'s check: about dtypes only, whatever the shapes.
    if (e.msg().rfind("expected scalar type ", 0) == 0) return Rejection{false, e.msg()};
  } catch (const std::exception&) {
    // Not a dtype verdict (see DispatchProbe.h).
  }
  return std::nullopt;
}

void raise(const Rejection& rejection) {
  TORCH_CHECK_NOT_IMPLEMENTED(!rejection.notImplemented, rejection.message);
  TORCH_CHECK(false, rejection.message);
}

}  // namespace openreg::dispatch_probe
