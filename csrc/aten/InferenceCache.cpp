#include "InferenceCache.h"

#include <c10/core/DefaultDtype.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "Launch.h"

namespace openreg {
namespace {

constexpr size_t kMaxEntries = 1 << 16;  // bounded: a pathological shape sweep just stops caching

std::mutex g_mutex;
std::unordered_map<std::string, std::shared_ptr<const CachedInference>> g_cache;  // GUARDED_BY g_mutex

template <class T>
void put(std::string& key, const T& value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void putInts(std::string& key, c10::IntArrayRef values) {
  put(key, values.size());
  key.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
}

// Tensors: metadata plus which earlier openreg storage they share (aliasing
// decides which outputs are views), so a[0] and a differ from a and b.
struct KeyBuilder {
  std::string key;
  std::vector<const c10::StorageImpl*> storages;

  bool tensor(const at::Tensor& t) {
    if (!t.defined()) {
      key.push_back('u');
      return true;
    }
    if (t.layout() != c10::kStrided) return false;
    key.push_back(isOpenReg(t) ? 'T' : (t.unsafeGetTensorImpl()->is_wrapped_number() ? 'W' : 'C'));
    put(key, t.scalar_type());
    // The math bits: Meta checks them (view_as_real refuses a conjugate) and
    // views inherit them.
    key.push_back(static_cast<char>('0' + t.is_conj() + 2 * t.is_neg()));
    put(key, t.device().index());
    putInts(key, t.sizes());
    putInts(key, t.strides());
    put(key, t.storage_offset());
    put(key, t.storage().nbytes());
    if (!isOpenReg(t)) {
      // A host tensor's values may shape the output (e.g. a CPU size operand):
      // small ones are part of the key, larger ones make the call uncacheable.
      if (!t.is_cpu() || t.numel() > 8 || !t.is_contiguous()) return false;
      key.append(static_cast<const char*>(t.const_data_ptr()), t.numel() * t.element_size());
    } else {
      const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
      size_t group = 0;
      while (group < storages.size() && storages[group] != s) ++group;
      if (group == storages.size()) storages.push_back(s);
      put(key, group);
    }
    return true;
  }

  bool value(const c10::IValue& v) {
    if (v.isTensor()) return tensor(v.toTensor());
    if (v.isNone()) {
      key.push_back('n');
    } else if (v.isInt()) {
      key.push_back('i');
      put(key, v.toInt());
    } else if (v.isDouble()) {
      key.push_back('d');
      put(key, v.toDouble());
    } else if (v.isBool()) {
      key.push_back('b');
      put(key, v.toBool());
    } else if (v.isIntList()) {
      key.push_back('l');
      putInts(key, v.toIntList().vec());
    } else if (v.isString()) {
      key.push_back('s');
      const auto& s = v.toStringRef();
      put(key, s.size());
      key.append(s);
    } else if (v.isDevice()) {
      key.push_back('v');
      put(key, v.toDevice().type());
      put(key, v.toDevice().index());
    } else if (v.isGenerator()) {
      key.push_back('g');  // does not affect output metadata
    } else if (v.isTensorList()) {
      key.push_back('L');
      auto list = v.toTensorList();
      put(key, list.size());
      for (const at::Tensor& t : list)
        if (!tensor(t)) return false;
    } else {
      return false;  // Scalars of complex type, lists of optionals, ...: not cached
    }
    return true;
  }
};

}  // namespace

CachedTensorMeta metaOf(const at::Tensor& t) {
  return {t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type(), t.is_conj(),
          t.is_neg()};
}

std::optional<std::string> inferenceKey(const c10::OperatorHandle& op, const c10::IValue* args,
                                        size_t num_args) {
  for (const auto& r : op.schema().returns())
    if (r.type()->kind() != c10::TypeKind::TensorType) return std::nullopt;
  KeyBuilder builder;
  builder.key.reserve(256);
  const auto* schema = &op.schema();
  put(builder.key, schema);  // schemas live as long as their operator registration
  put(builder.key, c10::typeMetaToScalarType(c10::get_default_dtype()));  // factories' dtype
  for (size_t i = 0; i < num_args; ++i)
    if (!builder.value(args[i])) return std::nullopt;
  return std::move(builder.key);
}

std::shared_ptr<const CachedInference> lookupInference(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(key);
  return it == g_cache.end() ? nullptr : it->second;
}

void storeInference(const std::string& key, std::shared_ptr<const CachedInference> entry) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_cache.size() < kMaxEntries) g_cache.emplace(key, std::move(entry));
}

}  // namespace openreg
