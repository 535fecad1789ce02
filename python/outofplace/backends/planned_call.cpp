// A planned call to XLA:CPU, in C++: `Compiled.__call__` after its first checked call.
//
// backends/xla.py's calling convention, with the per-call work that is the same every
// call taken out of Python: the arguments are compared with the layouts of the call the
// plan was made from (dtype, shape, strides, storage offset, CPU; no written argument
// requiring grad or an inference tensor outside inference mode), each written argument
// must already be XLA's (adopted, covering its whole storage, no other argument starting
// in its memory), small read-only arguments are copied into their kept buffers, the
// executable runs, each donated buffer comes back at its address, written arguments bump
// their version, and the other results become tensors over XLA's buffers. Anything else
// (a first call, another layout, a buffer XLA moved, a failure) is Python's: `__call__`
// returns None before anything is changed, or calls back into CpuExecutable. The Python
// twin of this file is `xla._PlannedCall`; the tests run both.
#include <torch/extension.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <vector>

namespace py = pybind11;

namespace {

struct Layout {
  at::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  int64_t offset;
};

struct Stage {  // a small read-only argument's kept buffer (xla._Stage)
  int64_t index;
  py::object stage;  // its Python object: copies any layout in
  py::object array;  // the jax Array over the buffer
  void* ptr;
  int64_t nbytes;
};

struct Result {  // how an unaliased result becomes a tensor
  int64_t index;
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
};

// Attribute names read on every call, made once.
struct Names {
  py::str array{"array"}, ptr{"ptr"}, nbytes{"nbytes"}, consume{"consume_with_handlers"},
      buffer_pointer{"unsafe_buffer_pointer"}, executable{"executable"},
      execute{"execute_sharded"};
};

const Names& names() {
  static const Names* names = new Names();  // never freed: outlives the interpreter
  return *names;
}

uintptr_t buffer_pointer(const py::handle& array) {
  return array.attr(names().buffer_pointer)().cast<uintptr_t>();
}

// A tensor over a jax Array's buffer, no copy: the tensor keeps the array alive.
at::Tensor tensor_over(const py::object& array, const Result& result) {
  int64_t numel = 1;
  for (int64_t size : result.sizes) numel *= size;
  auto options = at::TensorOptions().dtype(result.dtype);
  if (numel == 0) return at::empty(result.sizes, options);
  auto ptr = reinterpret_cast<void*>(buffer_pointer(array));
  PyObject* owner = array.ptr();
  Py_INCREF(owner);
  return at::from_blob(
      ptr, result.sizes,
      [owner](void*) {
        if (!Py_IsInitialized()) return;
        py::gil_scoped_acquire gil;
        Py_DECREF(owner);
      },
      options);
}

class PlannedCall {
 public:
  PlannedCall(py::object executable, py::list layouts, std::vector<int64_t> written)
      : executable_(executable), written_(std::move(written)) {
    for (py::handle item : layouts) {
      auto entry = item.cast<py::tuple>();
      layouts_.push_back({entry[0].cast<at::ScalarType>(),
                          entry[1].cast<std::vector<int64_t>>(),
                          entry[2].cast<std::vector<int64_t>>(),
                          entry[3].cast<int64_t>()});
    }
    auto io_map = executable.attr("io_map").cast<py::dict>();
    donated_ = executable.attr("donated").cast<std::vector<int64_t>>();
    for (int64_t i : donated_) aliased_.push_back(io_map[py::int_(i)].cast<int64_t>());
    for (auto item : executable.attr("_stages").cast<py::dict>()) {
      py::object stage = py::reinterpret_borrow<py::object>(item.second);
      stages_.push_back({item.first.cast<int64_t>(), stage, stage.attr("array"),
                         reinterpret_cast<void*>(stage.attr("ptr").cast<uintptr_t>()),
                         stage.attr("nbytes").cast<int64_t>()});
    }
    zero_copied_ = executable.attr("_zero_copied").cast<std::vector<int64_t>>();
    for (py::handle r : executable.attr("_unaliased")) {
      int64_t index = r.cast<int64_t>();
      py::object viewer = executable.attr("_viewers")[py::int_(index)];
      results_.push_back({index, viewer.attr("shape").cast<std::vector<int64_t>>(),
                          viewer.attr("dtype").cast<at::ScalarType>()});
    }
    handlers_ = executable.attr("_handlers");
    zero_copy_ = executable.attr("_zero_copy");
    execute_failed_ = executable.attr("_execute_failed");
    failed_after_ = executable.attr("_failed_after");
    moved_ = executable.attr("_moved");
    py::module_ xla = py::module_::import("outofplace.backends.xla");
    acquire_ = xla.attr("_LOCK").attr("acquire");
    release_ = xla.attr("_LOCK").attr("release");
    holders_get_ = xla.attr("_HOLDERS").attr("get");
  }

  // The call's results (None for a result aliased with an argument), or None when the
  // call is not like the planned one: nothing is changed then.
  py::object call(py::sequence inputs) {
    const size_t n = layouts_.size();
    if (static_cast<size_t>(py::len(inputs)) != n) return py::none();
    std::vector<at::Tensor> tensors;
    tensors.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      PyObject* object = inputs[i].ptr();
      if (!THPVariable_Check(object)) return py::none();
      const at::Tensor& tensor = THPVariable_Unpack(object);
      const Layout& layout = layouts_[i];
      if (tensor.layout() != at::kStrided || !tensor.device().is_cpu() ||
          tensor.scalar_type() != layout.dtype || !tensor.sizes().equals(layout.sizes) ||
          !tensor.strides().equals(layout.strides) ||
          tensor.storage_offset() != layout.offset)
        return py::none();
      tensors.push_back(tensor);
    }
    if (at::GradMode::is_enabled())
      for (int64_t i : written_)
        if (tensors[i].requires_grad()) return py::none();

    const Names& name = names();
    acquire_();
    struct Release {
      py::object& release;
      ~Release() {
        try {
          release();
        } catch (py::error_already_set&) {
        }
      }
    } release{release_};

    // Each written argument is XLA's already, and the only one starting in its memory.
    std::vector<py::object> holders;
    holders.reserve(donated_.size());
    for (int64_t i : donated_) {
      const at::Tensor& tensor = tensors[i];
      if (tensor.is_inference() && !c10::InferenceMode::is_enabled()) return py::none();
      auto start = reinterpret_cast<uintptr_t>(tensor.data_ptr());
      py::object holder = holders_get_(start);
      if (holder.is_none() || !tensor.is_contiguous() || tensor.is_neg() ||
          static_cast<int64_t>(tensor.nbytes()) != holder.attr(name.nbytes).cast<int64_t>())
        return py::none();
      uintptr_t end = start + tensor.nbytes();
      int starting = 0;
      for (const at::Tensor& other : tensors) {
        auto at = reinterpret_cast<uintptr_t>(other.data_ptr());
        starting += at >= start && at < end;
      }
      if (starting != 1) return py::none();
      holders.push_back(std::move(holder));
    }

    py::list arguments(n);
    for (const Stage& stage : stages_) {
      const at::Tensor& tensor = tensors[stage.index];
      if (tensor.is_contiguous() && !tensor.is_neg() && !tensor.is_conj()) {
        std::memcpy(stage.ptr, tensor.data_ptr(), stage.nbytes);  // its bytes are its values
        arguments[stage.index] = stage.array;
      } else {
        arguments[stage.index] = stage.stage(inputs[stage.index]);
      }
    }
    for (int64_t i : zero_copied_) arguments[i] = zero_copy_(i, inputs[i]);
    for (size_t d = 0; d < donated_.size(); ++d)
      arguments[donated_[d]] = holders[d].attr(name.array);

    py::list results;
    try {
      // read at each call, as CpuExecutable.execute does (tests replace it)
      py::object run = executable_.attr(name.executable).attr(name.execute);
      results = run(arguments).attr(name.consume)(handlers_).cast<py::list>();
    } catch (py::error_already_set& error) {
      py::dict adopted;
      for (size_t d = 0; d < donated_.size(); ++d) adopted[py::int_(donated_[d])] = holders[d];
      execute_failed_(inputs, adopted, error.value());  // raises
      throw;
    }

    py::list done;
    try {
      for (size_t d = 0; d < donated_.size(); ++d) {
        int64_t i = donated_[d];
        py::object result = results[aliased_[d]];
        if (buffer_pointer(result) == holders[d].attr(name.ptr).cast<uintptr_t>())
          holders[d].attr(name.array) = result;
        else  // XLA wrote elsewhere: the storage follows the new buffer
          moved_(i, inputs[i], result);
        done.append(i);
        torch::autograd::impl::bump_version(tensors[i]);
      }
      py::list out(results.size());
      for (const Result& result : results_)
        out[result.index] = py::reinterpret_steal<py::object>(
            THPVariable_Wrap(tensor_over(results[result.index], result)));
      return std::move(out);
    } catch (py::error_already_set& error) {
      failed_after_(done, error.value());  // raises
      throw;
    }
  }

 private:
  py::object executable_;
  std::vector<Layout> layouts_;
  std::vector<int64_t> written_, donated_, aliased_, zero_copied_;
  std::vector<Stage> stages_;
  std::vector<Result> results_;
  py::object handlers_, zero_copy_, execute_failed_, failed_after_, moved_;
  py::object acquire_, release_, holders_get_;
};

}  // namespace

PYBIND11_MODULE(_planned_call, m) {
  m.doc() = "Compiled.__call__'s planned calls to XLA:CPU (backends/planned_call.cpp)";
  py::class_<PlannedCall>(m, "PlannedCall")
      .def(py::init<py::object, py::list, std::vector<int64_t>>(),
           py::arg("executable"), py::arg("layouts"), py::arg("written"))
      .def("__call__", &PlannedCall::call, py::arg("inputs"));
}
