// What the planned calls share (planned_call.cpp: one device; sharded_call.cpp: a mesh):
// the layouts a plan was made for, Python names read on every call, and tensors over
// XLA's buffers.
#pragma once

#include <torch/extension.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <vector>

namespace outofplace __attribute__((visibility("hidden"))) {

namespace py = pybind11;

struct Layout {  // of an argument, as the call the plan was made from had it
  at::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  int64_t offset;
};

// (dtype, shape, strides, storage offset) tuples, as Compiled._make_plan lists them
inline std::vector<Layout> parse_layouts(const py::object& layouts) {
  std::vector<Layout> parsed;
  for (py::handle item : layouts) {
    auto entry = item.cast<py::tuple>();
    parsed.push_back({entry[0].cast<at::ScalarType>(), entry[1].cast<std::vector<int64_t>>(),
                      entry[2].cast<std::vector<int64_t>>(), entry[3].cast<int64_t>()});
  }
  return parsed;
}

// The arguments as tensors when each is a strided CPU tensor of its layout, else nothing.
inline std::optional<std::vector<at::Tensor>> laid_out(const py::sequence& inputs,
                                                       const std::vector<Layout>& layouts) {
  const size_t n = layouts.size();
  if (static_cast<size_t>(py::len(inputs)) != n) return std::nullopt;
  std::vector<at::Tensor> tensors;
  tensors.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* object = inputs[i].ptr();
    if (!THPVariable_Check(object)) return std::nullopt;
    const at::Tensor& tensor = THPVariable_Unpack(object);
    const Layout& layout = layouts[i];
    if (tensor.layout() != at::kStrided || !tensor.device().is_cpu() ||
        tensor.scalar_type() != layout.dtype || !tensor.sizes().equals(layout.sizes) ||
        !tensor.strides().equals(layout.strides) || tensor.storage_offset() != layout.offset)
      return std::nullopt;
    tensors.push_back(tensor);
  }
  return tensors;
}

// The bytes from a tensor's first element to just past its last (torch's strides are
// not negative); empty for a tensor without elements.
inline std::pair<uintptr_t, uintptr_t> byte_span(const at::Tensor& tensor) {
  auto start = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  if (tensor.numel() == 0) return {start, start};
  int64_t last = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) last += (tensor.size(d) - 1) * tensor.stride(d);
  return {start, start + static_cast<uintptr_t>((last + 1) * tensor.element_size())};
}

// For each argument, whether no other argument's bytes meet its own (one sort of their
// spans, not a pass over the others for each). Conservative: a call where they meet is
// handed back to Python, whose one predicate (call_checks.arguments) decides whether they
// share elements, so the planned call never runs a call Python refuses.
inline std::vector<bool> alone_in_their_memory(const std::vector<at::Tensor>& tensors) {
  struct Span {
    uintptr_t start, end;
    size_t index;
  };
  std::vector<Span> spans;  // (a tensor without elements meets nothing)
  spans.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto [start, end] = byte_span(tensors[i]);
    if (start < end) spans.push_back({start, end, i});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start < b.start; });
  std::vector<bool> alone(tensors.size(), true);
  uintptr_t reach = 0;  // the furthest end of the spans before this one
  for (size_t p = 0; p < spans.size(); ++p) {
    if (reach > spans[p].start) alone[spans[p].index] = false;
    if (p + 1 < spans.size() && spans[p + 1].start < spans[p].end)
      alone[spans[p].index] = false;
    reach = std::max(reach, spans[p].end);
  }
  return alone;
}

// Attribute names read on every call, made once.
struct Names {
  py::str array{"array"}, ptr{"ptr"}, nbytes{"nbytes"}, consume{"consume_with_handlers"},
      buffer_pointer{"unsafe_buffer_pointer"}, executable{"executable"},
      execute{"execute_sharded"}, arrays{"_arrays"}, block{"block_until_ready"},
      replicated{"_fully_replicated_shard"}, holds{"holds"}, version{"version"};
};

inline const Names& names() {
  static const Names* names = new Names();  // never freed: outlives the interpreter
  return *names;
}

inline uintptr_t buffer_pointer(const py::handle& array) {
  return array.attr(names().buffer_pointer)().cast<uintptr_t>();
}

struct Result {  // how an unaliased result becomes a tensor
  int64_t index;
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
};

// The results a plan makes tensors of: xla.buffers.Viewer's, by result index.
inline std::vector<Result> viewed_results(const py::object& indices, const py::object& viewers) {
  std::vector<Result> results;
  for (py::handle r : indices) {
    int64_t index = r.cast<int64_t>();
    py::object viewer = viewers[py::int_(index)];
    results.push_back({index, viewer.attr("shape").cast<std::vector<int64_t>>(),
                       viewer.attr("dtype").cast<at::ScalarType>()});
  }
  return results;
}

// The addresses of the XLA buffers that live result tensors cover (touched with the GIL
// held): a later call that writes such a tensor may take its memory over, as it takes
// over a torch allocation (xla.why_not_adoptable asks `is_result_buffer`).
inline std::unordered_set<uintptr_t>& result_buffers() {
  static std::unordered_set<uintptr_t> buffers;
  return buffers;
}

// A tensor over a jax Array's buffer, no copy: the tensor keeps the array alive.
inline at::Tensor tensor_over(const py::object& array, const Result& result) {
  int64_t numel = 1;
  for (int64_t size : result.sizes) numel *= size;
  auto options = at::TensorOptions().dtype(result.dtype);
  if (numel == 0) return at::empty(result.sizes, options);
  uintptr_t address = buffer_pointer(array);
  PyObject* owner = array.ptr();
  Py_INCREF(owner);
  result_buffers().insert(address);
  return at::from_blob(
      reinterpret_cast<void*>(address), result.sizes,
      [owner, address](void*) {
        if (!Py_IsInitialized()) return;
        py::gil_scoped_acquire gil;
        result_buffers().erase(address);
        Py_DECREF(owner);
      },
      options);
}

inline py::object wrap(at::Tensor tensor) {
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(tensor)));
}

// Holds a Python lock (its acquire and release) for a scope.
class Locked {
 public:
  Locked(const py::object& acquire, const py::object& release) : release_(release) {
    acquire();
  }
  ~Locked() {
    try {
      release_();
    } catch (py::error_already_set&) {
    }
  }

 private:
  const py::object& release_;
};

}  // namespace outofplace
