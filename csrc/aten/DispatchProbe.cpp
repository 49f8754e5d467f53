#include "DispatchProbe.h"

#include <string_view>

#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <c10/util/ScopeExit.h>

#include "OpenMPThreads.h"

#include <cmath>
#include <iterator>

namespace openreg::dispatch_probe {

namespace {

// How runProbe's current run fills probe tensors.
enum class Fill { kZeros, kOnes, kOnesInFloat };
thread_local Fill t_fill = Fill::kZeros;

// An integer or bool dtype turns float32 in the third run.
at::ScalarType probeDtype(at::ScalarType dtype) {
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  return t_fill == Fill::kOnesInFloat && integral ? at::kFloat : dtype;
}

// Zeros, or ones in runProbe's and checkShapes' later runs.
at::Tensor filled(at::IntArrayRef sizes, at::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype);
  return t_fill == Fill::kZeros ? at::zeros(sizes, options) : at::ones(sizes, options);
}

}  // namespace

at::Tensor probeTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  std::vector<int64_t> sizes(t.dim()), stored(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    sizes[d] = t.size(d) == 1 ? 1 : 2;
    stored[d] = t.stride(d) == 0 ? 1 : sizes[d];
  }
  at::Tensor probe = filled(stored, probeDtype(t.scalar_type()));
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

at::Tensor exactProbeTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  return filled(t.sizes(), t.scalar_type());
}

at::Tensor probeOutput(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty({0}, at::TensorOptions().dtype(probeDtype(t.scalar_type())));
}

namespace {

// Runs `probe` with probe tensors filled as `fill` says; its error, if it raised.
std::exception_ptr errorWith(Fill fill, const std::function<void()>& probe) {
  t_fill = fill;
  auto restore = c10::make_scope_exit([] { t_fill = Fill::kZeros; });
  try {
    probe();
  } catch (const std::exception&) {
    return std::current_exception();
  }
  return nullptr;
}

bool isNotImplemented(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::NotImplementedError&) {
    return true;
  } catch (...) {
  }
  return false;
}

// Called while handling the probe's exception: it, if the kernel's own dtype
// check raised it rather than one of shapes or values (see DispatchProbe.h);
// or AT_DISPATCH's NotImplementedError that only the probe filled with ones
// reaches (zeros failed a check of values first: segment_reduce's lengths
// summing to the data's size).
std::exception_ptr ownDtypeCheck(const std::function<void()>& probe) {
  auto error = std::current_exception();
  std::exception_ptr withOnes = errorWith(Fill::kOnes, probe);
  if (!withOnes) return nullptr;
  if (isNotImplemented(withOnes)) return withOnes;
  if (!errorWith(Fill::kOnesInFloat, probe)) return error;
  return nullptr;
}

// A Scalar argument the dtype cannot hold (checked_convert's "value cannot be
// converted to type int8_t without overflow", "Converting complex Scalar to
// non-complex type is not supported"): decided by the Scalar and the dtype
// only, never by the probe's values, so a verdict even where float32 fails too.
bool isScalarConversionError(std::string_view message) {
  return message.find("without overflow") != std::string_view::npos ||
         message.find("Converting complex Scalar to non-complex type") != std::string_view::npos;
}

}  // namespace

std::optional<Rejection> runProbe(const std::function<void()>& probe) {
  SerialOpenMP serial;  // tiny tensors: waking a team would cost more
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard silence(&drop);
  try {
    probe();
  } catch (const c10::NotImplementedError& e) {
    return Rejection{true, e.msg(), nullptr};
  } catch (const c10::Error& e) {
    // TensorBase::data_ptr<T>'s check: about dtypes only, whatever the shapes.
    if (e.msg().rfind("expected scalar type ", 0) == 0) return Rejection{false, e.msg(), nullptr};
    if (isScalarConversionError(e.msg())) return Rejection{false, e.msg(), std::current_exception()};
    if (auto error = ownDtypeCheck(probe)) return Rejection{false, e.msg(), error};
  } catch (const std::exception& e) {
    // c10::checked_convert's overflow ("value cannot be converted to type
    // int8_t without overflow": an alpha) is a std::runtime_error.
    if (isScalarConversionError(e.what())) return Rejection{false, e.what(), std::current_exception()};
    if (auto error = ownDtypeCheck(probe)) return Rejection{false, e.what(), error};
  }
  return std::nullopt;
}

void checkShapes(const std::function<void()>& probe) {
  SerialOpenMP serial;  // tiny tensors: waking a team would cost more
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard silence(&drop);
  try {
    probe();
  } catch (const std::exception&) {
    auto error = std::current_exception();
    if (errorWith(Fill::kOnes, probe)) std::rethrow_exception(error);
  }
}

void raise(const Rejection& rejection) {
  if (rejection.error) std::rethrow_exception(rejection.error);
  TORCH_CHECK_NOT_IMPLEMENTED(!rejection.notImplemented, rejection.message);
  TORCH_CHECK(false, rejection.message);
}

}  // namespace openreg::dispatch_probe
