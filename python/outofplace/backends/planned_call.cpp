// A planned call to XLA:CPU, in C++: `Compiled.__call__` after its first checked call.
//
// backends/xla.py's calling convention, with the per-call work that is the same every
// call taken out of Python: the arguments are compared with the layouts of the call the
// plan was made from (dtype, shape, strides, storage offset, CPU; no written argument
// requiring grad or an inference tensor outside inference mode), each written argument
// must already be XLA's (adopted, covering its whole storage, no other argument starting
// in its memory), small read-only arguments are copied into their kept buffers, the
// executable runs (through `at_home` when it calls kernels: kernel_home.h), each donated
// buffer comes back at its address, written arguments bump their version, and the other
// results become tensors over XLA's buffers. Anything else
// (a first call, another layout, a buffer XLA moved, a failure) is Python's: `__call__`
// returns None before anything is changed, or calls back into CpuExecutable. It refuses
// no call itself: what it checks comes from the plan (call_checks.planned), and a call it
// hands back is refused, or not, by call_checks.arguments, the one predicate. The Python
// twin of this file is `xla.planned.PlannedCall`; the tests run both. The extension also holds
// the sharded planned call (sharded_call.cpp).
#include "calls.h"

#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <vector>

namespace outofplace __attribute__((visibility("hidden"))) {

void bind_sharded_call(py::module_& m);

namespace {

struct Stage {  // a small read-only argument's kept buffer (xla.buffers.Stage)
  int64_t index;
  py::object stage;  // its Python object: copies any layout in
  py::object array;  // the jax Array over the buffer
  void* ptr;
  int64_t nbytes;
};

class PlannedCall {
 public:
  // Reads the plan's fields (xla.CallPlan) and nothing else of outofplace's.
  explicit PlannedCall(py::object plan)
      : executable_(plan.attr("executable")), layouts_(parse_layouts(plan.attr("layouts"))),
        written_(plan.attr("written").cast<std::vector<int64_t>>()),
        donated_(plan.attr("donated").cast<std::vector<int64_t>>()),
        aliased_(plan.attr("aliased").cast<std::vector<int64_t>>()),
        zero_copied_(plan.attr("zero_copied").cast<std::vector<int64_t>>()) {
    for (py::handle item : plan.attr("stages")) {
      auto entry = item.cast<py::tuple>();
      py::object stage = entry[1];
      stages_.push_back({entry[0].cast<int64_t>(), stage, stage.attr("array"),
                         reinterpret_cast<void*>(stage.attr("ptr").cast<uintptr_t>()),
                         stage.attr("nbytes").cast<int64_t>()});
    }
    results_ = viewed_results(plan.attr("unaliased"), plan.attr("viewers"));
    handlers_ = plan.attr("handlers");
    zero_copy_ = plan.attr("zero_copy");
    execute_failed_ = plan.attr("execute_failed");
    failed_after_ = plan.attr("failed_after");
    moved_ = plan.attr("moved");
    at_home_ = plan.attr("at_home");
    acquire_ = plan.attr("lock").attr("acquire");
    release_ = plan.attr("lock").attr("release");
    holders_get_ = plan.attr("holder_at");
  }

  // The call's results (a written argument's the caller's tensor itself, as the engine
  // contract of backends/engines.py says), or None when the call is not like the planned
  // one: nothing is changed then.
  py::object call(py::sequence inputs) {
    auto laid = laid_out(inputs, layouts_);
    if (!laid) return py::none();
    const std::vector<at::Tensor>& tensors = *laid;
    if (at::GradMode::is_enabled())
      for (int64_t i : written_)
        if (tensors[i].requires_grad()) return py::none();

    const Names& name = names();
    Locked locked(acquire_, release_);

    // Each written argument is XLA's already, and the only one starting in its memory.
    std::vector<py::object> holders;
    holders.reserve(donated_.size());
    std::vector<bool> alone = alone_in_their_memory(tensors);
    for (int64_t i : donated_) {
      const at::Tensor& tensor = tensors[i];
      if (tensor.is_inference() && !c10::InferenceMode::is_enabled()) return py::none();
      py::object holder = holders_get_(reinterpret_cast<uintptr_t>(tensor.data_ptr()));
      if (holder.is_none() || !tensor.is_contiguous() || tensor.is_neg() ||
          static_cast<int64_t>(tensor.nbytes()) != holder.attr(name.nbytes).cast<int64_t>() ||
          !alone[i])
        return py::none();
      holders.push_back(std::move(holder));
    }

    py::list arguments(tensors.size());
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
      py::object ran = at_home_.is_none() ? run(arguments) : at_home_(run, arguments);
      results = ran.attr(name.consume)(handlers_).cast<py::list>();
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
      for (size_t d = 0; d < donated_.size(); ++d)  // the engine contract: the caller's tensor
        out[aliased_[d]] = inputs[donated_[d]];
      for (const Result& result : results_)
        out[result.index] = wrap(tensor_over(results[result.index], result));
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
  py::object handlers_, zero_copy_, execute_failed_, failed_after_, moved_, at_home_;
  py::object acquire_, release_, holders_get_;
};

}  // namespace
}  // namespace outofplace

PYBIND11_MODULE(_planned_call, m) {
  using outofplace::PlannedCall;
  m.doc() = "Compiled.__call__'s planned calls to XLA:CPU (backends/planned_call.cpp, "
            "backends/sharded_call.cpp)";
  pybind11::class_<PlannedCall>(m, "PlannedCall")
      .def(pybind11::init<pybind11::object>(), pybind11::arg("plan"))
      .def("__call__", &PlannedCall::call, pybind11::arg("inputs"));
  m.def("is_result_buffer",
        [](uintptr_t address) { return outofplace::result_buffers().count(address) > 0; },
        pybind11::arg("address"),
        "Whether a live result tensor a planned call made covers the XLA buffer at address");
  outofplace::bind_sharded_call(m);
}
