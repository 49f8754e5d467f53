// Python bindings of oreg_ccl (part of openreg._C): the backend class, with
// c10d::Backend as its base and an intrusive_ptr holder so c10d can hold it,
// and its Options (deep-copyable: split_group deep-copies `backend.options`).
// openreg/_ccl.py registers the backend with torch.distributed.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "BusyClock.h"
#include "OregBackend.h"
#include "Releaser.h"

namespace py = pybind11;

namespace openreg::ccl {

void initBindings(py::module_& m) {
  // The base classes must be registered before ours refer to them.
  py::module_::import("torch._C._distributed_c10d");
  using Options = OregBackend::Options;
  py::class_<Options, c10d::Backend::Options, c10::intrusive_ptr<Options>>(m, "_OregCCLOptions")
      .def(py::init<std::chrono::milliseconds>(), py::arg("timeout") = ::kBackendDefaultTimeout)
      .def("__copy__", [](const Options& o) { return c10::make_intrusive<Options>(o); })
      .def("__deepcopy__",
           [](const Options& o, py::dict) { return c10::make_intrusive<Options>(o); });

  py::class_<OregBackend, c10d::Backend, c10::intrusive_ptr<OregBackend>>(m, "_OregCCLBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::vector<uint64_t> globalRanks) {
             auto options = c10::make_intrusive<Options>(timeout);
             options->global_ranks_in_group = std::move(globalRanks);
             return c10::make_intrusive<OregBackend>(store, rank, size, options);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("global_ranks") = std::vector<uint64_t>{},
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("options", &OregBackend::options)
      // Introspection for tests: the group ranks of each host (host order of
      // first rank; more than one host means ZeroMQ between them), and the
      // prefix of the group's keys in its store.
      .def_property_readonly("_hosts", [](const OregBackend& b) { return b.topology().hosts; })
      .def_property_readonly("_store_prefix", &OregBackend::storePrefix)
      // new_group() calls this on ranks left out of a group split from a
      // device-bound default group (NCCL's ncclCommSplit needs every rank).
      // oreg_ccl builds each group from its members only: nothing to do.
      .def("perform_nocolor_split", [](OregBackend&, const py::object&) {})
      .def("_network_info", [](const OregBackend& b) {
        auto i = b.networkInfo();
        py::dict d;
        d["topology"] = i.topology;
        d["host_count"] = i.hostCount;
        d["endpoint"] = i.endpoint;
        d["group_id"] = i.groupId;
        d["rejected"] = i.rejected;
        d["single_copy"] = i.singleCopy;
        d["shared_chunks_written"] = i.sharedChunksWritten;
        d["peer_mapped_read"] = i.peerMappedRead;
        d["peer_mapped_written"] = i.peerMappedWritten;
        d["splits"] = i.splits;
        d["stream_markers"] = i.streamMarkers;
        d["stream_markers_skipped"] = i.streamMarkersSkipped;
        return d;
      });
  m.def("_ccl_busy_seconds", &collectiveBusySeconds);
  m.def("_ccl_stop_releaser", &stopReleaser, py::call_guard<py::gil_scoped_release>());
}

}  // namespace openreg::ccl
