// hetcomm._torch_backend: the Python side of ProcessGroupHetcomm. hetcomm/torch.py registers it with
// torch.distributed; users never import this module directly.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "python/torch_backend/process_group.h"

namespace py = pybind11;
using hetcomm::torch_backend::ProcessGroupHetcomm;

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "hetcomm's torch.distributed process group (import hetcomm.torch to register it)";
  // torch.distributed registered c10d::ProcessGroup and c10d::Store with pybind11; importing it first makes the
  // base class and the store argument known here.
  py::module::import("torch.distributed");
  ProcessGroupHetcomm::blockingRegion = [](const std::function<void()>& wait) {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release unlocked;
      wait();
    } else {
      wait();
    }
  };
  py::class_<ProcessGroupHetcomm, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupHetcomm>>(m, "ProcessGroupHetcomm")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<ProcessGroupHetcomm>(store, rank, size, timeout);
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("algorithm_for", &ProcessGroupHetcomm::algorithmFor, py::arg("count"),
           "the algorithm hetcomm runs for an allreduce of count float32 elements");
}
