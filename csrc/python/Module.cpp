// The openreg._C Python extension: the small surface the Python package
// (openreg/) needs beyond what torch.Stream / torch.Event / torch.accelerator
// already reach through the registered hooks.
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <thread>

#include "../runtime/LaunchingOp.h"
#include "CompiledKernels.h"
#include "MemorySnapshot.h"
#include "../aten/FallbackStats.h"
#include "../aten/Launch.h"
#include "../runtime/OpenRegCachingAllocator.h"
#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegFunctions.h"
#include "../runtime/OpenRegGenerator.h"
#include "../runtime/OpenRegGraph.h"
#include "../runtime/OpenRegHostAllocator.h"
#include "../runtime/OpenRegIPCTypes.h"
#include "../runtime/OpenRegIpcEvent.h"
#include "../runtime/OpenRegMemPool.h"
#include "../runtime/OpenRegStream.h"

namespace py = pybind11;

namespace openreg::ccl {
void initBindings(py::module_& m);  // csrc/c10d/Bindings.cpp
}  // namespace openreg::ccl

namespace openreg {
namespace {

c10::Stream streamFrom(int64_t stream_id, int64_t device_index) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1,
                                 static_cast<c10::DeviceIndex>(device_index)),
                     stream_id);
}

// The pinned allocator's statistics in torch.cuda.host_memory_stats()'s shape.
py::dict hostMemoryStats() {
  const at::HostStats stats = getHostAllocator()->get_stats();
  auto stat = [](const c10::CachingAllocator::Stat& s) {
    py::dict d;
    d["current"] = s.current;
    d["peak"] = s.peak;
    d["allocated"] = s.allocated;
    d["freed"] = s.freed;
    return d;
  };
  auto duration = [](const c10::CachingAllocator::DurationStat& s) {
    py::dict d;
    d["total"] = s.total;
    d["max"] = s.max;
    d["min"] = s.min;
    d["count"] = s.count;
    d["avg"] = s.count ? s.total / s.count : 0;
    return d;
  };
  py::dict result;
  result["allocations"] = stat(stats.allocations);
  result["allocated_bytes"] = stat(stats.allocated_bytes);
  result["active_requests"] = stat(stats.active_requests);
  result["active_bytes"] = stat(stats.active_bytes);
  result["num_host_alloc"] = stats.num_host_alloc;
  result["num_host_free"] = stats.num_host_free;
  result["host_alloc_time"] = duration(stats.host_alloc_time);
  result["host_free_time"] = duration(stats.host_free_time);
  return result;
}

}  // namespace
}  // namespace openreg

PYBIND11_MODULE(_C, m) {
  using namespace openreg;
  m.doc() = "openreg runtime bindings";
  openreg::ccl::initBindings(m);  // the oreg_ccl c10d backend

  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_device_physical_index", [](int device) { return orDevicePhysicalIndex(device); });
  m.def("_device_from_physical_index", [](int physical) { return orDeviceFromPhysicalIndex(physical); });
  m.def("_config_error", [] { return orConfigError(); });
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int d) {
    // torch.cuda.set_device initialises CUDA: is_initialized() is then True
    // (DeviceMesh keeps a device the user chose only when it is).
    OPENREG_CHECK(orInit());
    set_device(static_cast<c10::DeviceIndex>(d));
  });
  m.def("_init", [] { OPENREG_CHECK(orInit()); });  // torch.openreg._lazy_init
  m.def("_exchange_device", [](int64_t d) {
    if (d < 0) return -1;  // a no-op, as torch._C._cuda_exchangeDevice
    check_device_index(d);  // before narrowing
    return static_cast<int>(exchange_device(static_cast<c10::DeviceIndex>(d)));
  });
  m.def("_check_device", [](int64_t d) { check_device_index(d); });  // before any narrowing
  m.def("_is_initialized", [] { return orIsInitialized(); });
  m.def("_is_forked_child", [] { return orIsForkedChild(); });
  m.def("_device_total_memory", [] { return orDeviceTotalMemory(); });
  m.def("_device_used_memory", [](int d) { return orMemoryUsed(d); });
  m.def("_raw_alloc", [](size_t bytes, int64_t stream_id, int64_t device_index) {
    return reinterpret_cast<uintptr_t>(rawAlloc(bytes, streamFrom(stream_id, device_index)));
  });
  m.def("_raw_delete", [](uintptr_t ptr) { rawDelete(reinterpret_cast<void*>(ptr)); });
  m.def("_set_memory_fraction", [](double fraction, int d) {
    setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(d));
  });
  m.def("_get_memory_fraction",
        [](int d) { return getMemoryFraction(static_cast<c10::DeviceIndex>(d)); });
  bindMemorySnapshot(m);  // _record_memory_history, _snapshot
  bindCompiledKernels(m);  // _CompiledKernel (openreg/_inductor)
  // torch.accelerator.Graph (OpenRegGraph.cpp)
  m.def("_register_graph_impl", &registerGraphImpl);
  m.def("_graph_pool_handle", [] {
    c10::MempoolId_t id = graphPoolHandle();
    return py::make_tuple(id.first, id.second);
  });
  // torch.openreg.MemPool / use_mem_pool (OpenRegMemPool.cpp)
  py::class_<MemPool, std::shared_ptr<MemPool>>(m, "_MemPool")
      .def(py::init<bool, bool>(), py::arg("use_on_oom") = false, py::arg("no_split") = false)
      .def_property_readonly("id", [](const MemPool& p) { return p.id(); })
      .def_property_readonly("device", [](const MemPool& p) { return static_cast<int>(p.device()); })
      .def("use_count", [](const MemPool& p) { return poolUseCount(p.id()); });
  m.def("_begin_allocate_current_thread_to_pool", [](int device, c10::MempoolId_t id) {
    beginAllocateCurrentThreadToPool(static_cast<c10::DeviceIndex>(device), id);
  });
  m.def("_end_allocate_current_thread_to_pool", [](int device, c10::MempoolId_t id) {
    endAllocateCurrentThreadToPool(static_cast<c10::DeviceIndex>(device), id);
  });

  m.def("_set_sync_debug_mode", [](int mode) { set_sync_debug_mode(mode); });
  m.def("_get_sync_debug_mode", [] { return get_sync_debug_mode(); });
  m.def("_synchronize", [](int d) {
    py::gil_scoped_release no_gil;
    synchronizeDevice(static_cast<c10::DeviceIndex>(d));
  });
  m.def("_current_stream", [](int d) {
    c10::Stream s = getCurrentStream(static_cast<c10::DeviceIndex>(d));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()));
  });
  m.def("_default_stream", [](int d) {
    c10::Stream s = getDefaultStream(static_cast<c10::DeviceIndex>(d));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()));
  });
  m.def("_set_stream", [](int64_t stream_id, int64_t device_index) {
    setCurrentStream(streamFrom(stream_id, device_index));
  });
  m.def("_stream_priority", [](int64_t stream_id, int64_t device_index) {
    return streamPriority(streamFrom(stream_id, device_index));
  });
  // Like torch.cuda._sleep: a kernel that keeps the current stream busy.
  m.def("_sleep", [](double milliseconds) {
    c10::Stream s = getCurrentStream(current_device());
    OPENREG_CHECK(orLaunchKernel(rawStream(s), [milliseconds] {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(milliseconds));
    }));
  });
  // Benchmark helper: launches n empty kernels on the current stream and
  // waits; returns the mean host-side cost per launch in microseconds.
  m.def("_launch_empty", [](int64_t n) {
    py::gil_scoped_release no_gil;
    c10::Stream s = getCurrentStream(current_device());
    orStream raw = rawStream(s);
    auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) OPENREG_CHECK(orLaunchKernel(raw, [] {}));
    auto launched = std::chrono::steady_clock::now();
    OPENREG_CHECK(orStreamSynchronize(raw));
    return std::chrono::duration<double, std::micro>(launched - start).count() / static_cast<double>(n);
  });
  // Calls per operator that took the generic fallback, to check that an
  // operator is served natively (tests/ops/test_native_training_ops.py).
  m.def("_fallback_counts", [] {
    py::dict counts;
    for (const auto& [name, n] : fallbackCounts()) counts[py::str(name)] = n;
    return counts;
  });
  m.def("_reset_fallback_counts", [] { resetFallbackCounts(); });
  // A kernel that fails, to exercise asynchronous error reporting.
  m.def("_raise_in_kernel", [](const std::string& message) {
    c10::Stream s = getCurrentStream(current_device());
    OPENREG_CHECK(orLaunchKernel(rawStream(s), [message] { throw std::runtime_error(message); }));
  });

  // torch.Event.elapsed_time only accepts exact torch.Event instances, so the
  // torch.openreg.Event subclass times through here.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                "expected other to be a torch.Event object");
    auto* a = reinterpret_cast<THPEvent*>(start.ptr());
    auto* b = reinterpret_cast<THPEvent*>(end.ptr());
    return a->event.elapsedTime(b->event);
  });
  // Event(interprocess=True), ipc_handle(), from_ipc_handle() (OpenRegIpcEvent.h).
  auto thpEvent = [](py::handle event) -> c10::Event& {
    TORCH_CHECK(THPEvent_Check(event.ptr()), "expected a torch.Event");
    return reinterpret_cast<THPEvent*>(event.ptr())->event;
  };
  m.def("_event_make_interprocess", [thpEvent](py::handle event, c10::DeviceIndex device) {
    makeInterprocessEvent(thpEvent(event), device);
  });
  m.def("_event_open_interprocess",
        [thpEvent](py::handle event, c10::DeviceIndex device, const py::bytes& handle) {
          openInterprocessEvent(thpEvent(event), device, handle);
        });
  m.def("_event_ipc_handle", [thpEvent](py::handle event) {
    return py::bytes(interprocessEventHandle(thpEvent(event)));
  });
  m.def("_sanitizer_enable", [](bool on) {
    const bool was = orSanitizerEnabled();
    if (on && !was) trackLaunchingOps();  // names in reports from the first launch on
    orSanitizerEnable(on);
    if (!on && was) untrackLaunchingOps();
  });
  if (orSanitizerEnabled()) trackLaunchingOps();  // OPENREG_SANITIZER=1
  m.def("_sanitizer_enabled", [] { return orSanitizerEnabled(); });
  m.def("_drain_autograd_device_threads", [] {
    // At interpreter exit (atexit, openreg/__init__.py). The autograd engine
    // runs an openreg backward on a device thread, which drops its last task
    // (and Python-owned tensors in it) just after the caller was told the
    // backward finished; if the interpreter is finalising by then, taking
    // the GIL for that ends the thread inside a destructor: "terminate
    // called without an active exception" (about 1 run in 7). A tiny backward
    // per device, of tensors without Python objects, waits until every
    // device thread has dropped its previous task.
    if (!orIsInitialized() || orIsForkedChild()) return;
    py::gil_scoped_release no_gil;
    // Whatever mode the script ended in (no_grad, inference_mode), this backward needs a graph.
    c10::InferenceMode not_inference(/*enabled=*/false);
    c10::AutoGradMode grad_enabled(/*enabled=*/true);
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      if (!deviceHasAllocated(d)) continue;
      try {
        auto x = at::ones({1}, at::TensorOptions().device(c10::DeviceType::PrivateUse1, d))
                     .requires_grad_();
        torch::autograd::backward({x.sum()});
      } catch (const std::exception&) {
        // A failed stream or full device: nothing to drain that we could run.
      }
    }
  });
  m.def("_empty_cache", [] {
    py::gil_scoped_release no_gil;  // it waits for the streams
    getCachingAllocator()->emptyCache();
  });
  m.def("_host_memory_stats", &hostMemoryStats);
  m.def("_host_empty_cache", [] { getHostAllocator()->empty_cache(); });
  m.def("_reset_accumulated_host_memory_stats",
        [] { getHostAllocator()->reset_accumulated_stats(); });
  m.def("_reset_peak_host_memory_stats", [] { getHostAllocator()->reset_peak_stats(); });
  // torch.multiprocessing (openreg/_sharing.py; OpenRegIPCTypes.h). A storage
  // goes in and comes out as a uint8 tensor over it.
  m.def("_ipc_share", [](const at::Tensor& over) {
    IpcStorageHandle h;
    {
      py::gil_scoped_release no_gil;  // it may wait for a stream
      c10::Storage storage = over.storage();
      h = shareStorage(storage);
    }
    return py::make_tuple(h.device, h.nbytes, h.memory, h.refcounts, h.slot, h.event);
  });
  m.def("_ipc_collect", &collectSharedBlocks);
  m.def("_ipc_reuse", [](c10::DeviceIndex visible, int64_t device, int64_t nbytes,
                         std::array<int64_t, 5> memory, std::array<int64_t, 3> refcounts,
                         int64_t slot, std::array<int64_t, 5> event) {
    reuseSharedStorage({device, nbytes, memory, refcounts, slot, event}, visible);
  });
  m.def("_ipc_pending_releases", &pendingSharedReleases);
  m.def("_ipc_await_shared_writes", [](double seconds) {
    py::gil_scoped_release no_gil;
    awaitSharedWrites(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  });
  m.def("_ipc_open", [](int64_t device, int64_t nbytes, std::array<int64_t, 5> memory,
                        std::array<int64_t, 3> refcounts, int64_t slot,
                        std::array<int64_t, 5> event) {
    c10::Storage storage = openSharedStorage({device, nbytes, memory, refcounts, slot, event});
    return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage.device()))
        .set_(storage, 0, {nbytes}, {1});
  });
  m.def("_default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(getDefaultGenerator(static_cast<c10::DeviceIndex>(d))));
  });
}
