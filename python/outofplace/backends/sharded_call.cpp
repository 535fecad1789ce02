// A planned call of a sharded program, in C++: `Compiled.__call__` with a mesh after its
// first checked call (backends/spmd/executable.py, docs/sharding.md "Running").
//
// The work of `ShardedExecutable.__call__` that is the same every call, out of Python:
// the arguments are compared with the layouts of the call the plan was made from (as
// planned_call.cpp does), each written argument must be the tensor whose state the last
// call left on the devices (`_Resident.holds`), small read-only arguments are copied into
// the devices' kept buffers (`_Stage`), the program runs through jax's dispatch, and each
// written region is copied from the devices' new shards into the caller's tensor: where a
// `dynamic_update_slice` or a scatter at one index wrote (its starts constants or
// computed here from the call's arguments, host_scalars.py's trees) or, for a state that
// is not such a chain, all of it. A state written otherwise (a scatter at indices the
// program returns, a reshape) is handed to Python (`ShardedExecutable._keep`). Anything else (a first call, another layout, a state not
// on the devices, a negated view) returns None before anything is changed, and
// `Compiled.run` takes the call. It refuses no call itself: the layouts and written
// arguments it checks come from the plan (call_checks.planned), and a call it hands back
// is refused, or not, by call_checks.arguments, the one predicate. Without the extension
// every call is Python's.
#include "calls.h"

#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace outofplace __attribute__((visibility("hidden"))) {
namespace {

using Int = __int128;
using UInt = unsigned __int128;

enum class Op { Argument, Constant, Convert, Add, Subtract, Multiply, Maximum, Minimum,
                Negate, Select, Clamp, EQ, NE, LT, LE, GT, GE };

Op op_named(const std::string& name) {
  static const std::pair<const char*, Op> ops[] = {
      {"argument", Op::Argument}, {"constant", Op::Constant}, {"convert", Op::Convert},
      {"add", Op::Add}, {"subtract", Op::Subtract}, {"multiply", Op::Multiply},
      {"maximum", Op::Maximum}, {"minimum", Op::Minimum}, {"negate", Op::Negate},
      {"select", Op::Select}, {"clamp", Op::Clamp}, {"EQ", Op::EQ}, {"NE", Op::NE},
      {"LT", Op::LT}, {"LE", Op::LE}, {"GT", Op::GT}, {"GE", Op::GE}};
  for (const auto& [text, op] : ops)
    if (name == text) return op;
  throw std::invalid_argument("host_scalars: unknown op " + name);
}

// `value` as an integer of `bits` bits holds it (two's complement): host_scalars._wrap.
Int wrap_to(Int value, int bits, bool is_unsigned) {
  UInt held = static_cast<UInt>(value) & ((UInt(1) << bits) - 1);
  if (!is_unsigned && bits > 1 && held >= (UInt(1) << (bits - 1)))
    return static_cast<Int>(held) - (Int(1) << bits);
  return static_cast<Int>(held);
}

// One element of an integer (or bool) tensor.
Int element(const at::Tensor& tensor) {
  const void* p = tensor.data_ptr();
  switch (tensor.scalar_type()) {
    case at::kBool: return *static_cast<const bool*>(p);
    case at::kByte: return *static_cast<const uint8_t*>(p);
    case at::kChar: return *static_cast<const int8_t*>(p);
    case at::kShort: return *static_cast<const int16_t*>(p);
    case at::kInt: return *static_cast<const int32_t*>(p);
    case at::kLong: return *static_cast<const int64_t*>(p);
    case at::kUInt16: return *static_cast<const uint16_t*>(p);
    case at::kUInt32: return *static_cast<const uint32_t*>(p);
    case at::kUInt64: return *static_cast<const uint64_t*>(p);
    default: throw std::invalid_argument("host_scalars: not an integer tensor");
  }
}

bool integer(at::ScalarType dtype) {
  return dtype == at::kBool || (at::isIntegralType(dtype, false));
}

// host_scalars.Scalar, evaluated as `Scalar.__call__` does.
struct Scalar {
  Op op;
  int bits;
  bool is_unsigned;
  Int value;
  std::vector<Scalar> operands;

  static Scalar from(const py::handle& scalar) {
    Scalar parsed{op_named(scalar.attr("op").cast<std::string>()),
                  scalar.attr("bits").cast<int>(), scalar.attr("unsigned").cast<bool>(), 0, {}};
    py::object value = scalar.attr("value");
    parsed.value = value.cast<py::int_>() < py::int_(0)
                       ? static_cast<Int>(value.cast<int64_t>())
                       : static_cast<Int>(value.cast<uint64_t>());
    for (py::handle operand : scalar.attr("operands"))
      parsed.operands.push_back(from(operand));
    return parsed;
  }

  // Whether every argument it reads has an integer dtype in `layouts`.
  bool reads_integers(const std::vector<Layout>& layouts) const {
    if (op == Op::Argument)
      return value < static_cast<Int>(layouts.size()) &&
             integer(layouts[static_cast<size_t>(value)].dtype);
    return std::all_of(operands.begin(), operands.end(),
                       [&](const Scalar& o) { return o.reads_integers(layouts); });
  }

  Int operator()(const std::vector<at::Tensor>& inputs) const {
    switch (op) {
      case Op::Argument:
        return wrap_to(element(inputs[static_cast<size_t>(value)]), bits, is_unsigned);
      case Op::Constant: return value;
      default: break;
    }
    std::vector<Int> v;
    for (const Scalar& o : operands) v.push_back(o(inputs));
    auto wrapped = [&](UInt x) { return wrap_to(static_cast<Int>(x), bits, is_unsigned); };
    switch (op) {
      case Op::Convert: return wrap_to(v[0], bits, is_unsigned);
      // modulo 2**128, then wrapped: the same low bits as Python's exact integers
      case Op::Add: return wrapped(static_cast<UInt>(v[0]) + static_cast<UInt>(v[1]));
      case Op::Subtract: return wrapped(static_cast<UInt>(v[0]) - static_cast<UInt>(v[1]));
      case Op::Multiply: return wrapped(static_cast<UInt>(v[0]) * static_cast<UInt>(v[1]));
      case Op::Maximum: return wrap_to(std::max(v[0], v[1]), bits, is_unsigned);
      case Op::Minimum: return wrap_to(std::min(v[0], v[1]), bits, is_unsigned);
      case Op::Negate: return wrapped(UInt(0) - static_cast<UInt>(v[0]));
      case Op::Select: return v[0] ? v[1] : v[2];
      case Op::Clamp: return std::max(v[0], std::min(v[1], v[2]));
      default: break;
    }
    if (value)  // an unsigned comparison of operands of that width
      for (Int& x : v) x = wrap_to(x, static_cast<int>(value), true);
    switch (op) {
      case Op::EQ: return v[0] == v[1];
      case Op::NE: return v[0] != v[1];
      case Op::LT: return v[0] < v[1];
      case Op::LE: return v[0] <= v[1];
      case Op::GT: return v[0] > v[1];
      default: return v[0] >= v[1];
    }
  }
};

struct Start {  // of a write, in one dimension: a constant or computed from the arguments
  std::optional<Scalar> scalar;
  int64_t constant, size, length;  // the start (constant), the update's size, the dim's
  bool clamps;  // a dynamic_update_slice's (else out of bounds nothing is written)
};

using Box = std::vector<std::pair<int64_t, int64_t>>;  // [start, stop) per dimension

struct State {  // a written argument
  int64_t index, result;
  bool in_python;                  // its writes are not regions: ShardedExecutable._keep
  std::vector<std::vector<Start>> writes;  // each write's region
  std::vector<int64_t> distinct;  // the positions of the distinct shards, and their boxes
  std::vector<Box> boxes;
};

struct Staged {  // a small read-only argument's kept buffers on the devices (spmd.placement.Stage)
  int64_t index;
  py::object stage, array;
  std::vector<void*> addresses;
  int64_t nbytes;
  bool whole;  // every device holds all of it
};

// Copies `region` of the caller's tensor from a device's shard (contiguous, `box` of the
// whole), where they meet.
void copy_from_shard(const at::Tensor& tensor, const Box& region, const uint8_t* shard,
                     const Box& box) {
  const size_t rank = region.size();
  const int64_t size = tensor.element_size();
  std::vector<int64_t> lo(rank), count(rank), shard_stride(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(region[d].first, box[d].first);
    count[d] = std::min(region[d].second, box[d].second) - lo[d];
    if (count[d] <= 0) return;
  }
  int64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    shard_stride[d] = stride;
    stride *= box[d].second - box[d].first;
  }
  auto* target = static_cast<uint8_t*>(tensor.data_ptr());
  const uint8_t* source = shard;
  for (size_t d = 0; d < rank; ++d) {
    target += lo[d] * tensor.stride(d) * size;
    source += (lo[d] - box[d].first) * shard_stride[d] * size;
  }
  if (rank == 0) {
    std::memcpy(target, source, size);
    return;
  }
  const size_t last = rank - 1;
  const bool rows = tensor.stride(last) == 1;
  std::vector<int64_t> at(rank, 0);  // an odometer over all dimensions but the last
  while (true) {
    const uint8_t* from = source;
    uint8_t* to = target;
    for (size_t d = 0; d < last; ++d) {
      from += at[d] * shard_stride[d] * size;
      to += at[d] * tensor.stride(d) * size;
    }
    if (rows) {
      std::memcpy(to, from, count[last] * size);
    } else {
      for (int64_t i = 0; i < count[last]; ++i)
        std::memcpy(to + i * tensor.stride(last) * size, from + i * size, size);
    }
    size_t d = last;
    while (d > 0 && ++at[d - 1] == count[d - 1]) at[--d] = 0;
    if (d == 0) return;
  }
}

class ShardedCall {
 public:
  // Reads the plan's fields (spmd.ShardedPlan) and nothing else of outofplace's: its
  // `layouts` as PlannedCall's; `written` the written arguments that are the caller's (not
  // module state); `regions`: for each written argument, its writes ((start, update size,
  // dimension size, clamped) per dimension, the start an int or a host_scalars.Scalar:
  // ShardedExecutable._regions), or None for Python's; `results` how many results the
  // program has (the engine's module may return more).
  explicit ShardedCall(py::object plan)
      : layouts_(parse_layouts(plan.attr("layouts"))),
        written_(plan.attr("written").cast<std::vector<int64_t>>()),
        count_(plan.attr("results").cast<int64_t>()) {
    compiled_ = plan.attr("compiled");
    order_ = plan.attr("order").cast<std::vector<int64_t>>();
    auto io_map = plan.attr("io_map").cast<py::dict>();
    auto state = plan.attr("state").cast<py::dict>();
    auto regions = plan.attr("regions").cast<py::dict>();
    auto placements = plan.attr("placements").cast<py::dict>();
    py::list unaliased;
    for (int64_t r = 0; r < count_; ++r) {
      if (state.contains(py::int_(r)))
        returned_state_.push_back({static_cast<int64_t>(r),
                                   state[py::int_(r)].cast<int64_t>()});
      else
        unaliased.append(r);
    }
    results_ = viewed_results(unaliased, plan.attr("viewers"));
    auto stages = plan.attr("stages").cast<py::dict>();
    for (size_t i = 0; i < layouts_.size(); ++i) {
      py::int_ index(i);
      if (io_map.contains(index)) {
        State s{static_cast<int64_t>(i), io_map[index].cast<int64_t>(), true, {}, {}, {}};
        py::object writes = regions[index];
        py::object placement = placements[index];
        s.distinct = placement.attr("distinct").cast<std::vector<int64_t>>();
        s.boxes = placement.attr("boxes").cast<std::vector<Box>>();
        if (!writes.is_none()) {
          s.in_python = false;
          for (py::handle write : writes) {
            std::vector<Start> starts;
            for (py::handle item : write) {
              auto entry = item.cast<py::tuple>();
              Start start{std::nullopt, 0, entry[1].cast<int64_t>(), entry[2].cast<int64_t>(),
                          entry[3].cast<bool>()};
              if (py::isinstance<py::int_>(entry[0])) {
                start.constant = entry[0].cast<int64_t>();
              } else {
                start.scalar = Scalar::from(entry[0]);
                if (!start.scalar->reads_integers(layouts_)) s.in_python = true;
              }
              starts.push_back(std::move(start));
            }
            s.writes.push_back(std::move(starts));
          }
        }
        states_.push_back(std::move(s));
      } else if (stages.contains(index)) {
        py::object stage = stages[index];
        Staged staged{static_cast<int64_t>(i), stage, stage.attr("array"), {},
                      stage.attr("nbytes").cast<int64_t>(), stage.attr("whole").cast<bool>()};
        for (py::handle address : stage.attr("addresses"))
          staged.addresses.push_back(reinterpret_cast<void*>(address.cast<uintptr_t>()));
        staged_.push_back(std::move(staged));
      } else {
        lent_.push_back(static_cast<int64_t>(i));
      }
    }
    resident_ = plan.attr("resident");
    on_devices_ = plan.attr("on_devices");
    keep_ = plan.attr("keep");
    acquire_ = plan.attr("lock").attr("acquire");
    release_ = plan.attr("lock").attr("release");
  }

  // The call's results, as ShardedExecutable.__call__ returns them, or None when the call
  // is not like the planned one: nothing is changed then.
  py::object call(py::sequence inputs) {
    auto laid = laid_out(inputs, layouts_);
    if (!laid) return py::none();
    const std::vector<at::Tensor>& tensors = *laid;
    for (const at::Tensor& tensor : tensors)
      if (tensor.is_neg() || tensor.is_conj()) return py::none();
    if (at::GradMode::is_enabled())
      for (int64_t i : written_)
        if (tensors[i].requires_grad()) return py::none();

    const Names& name = names();
    Locked locked(acquire_, release_);

    // Each written argument is the tensor the last call left, its state on the devices.
    std::vector<py::tuple> keys;
    std::vector<py::object> residents;
    std::vector<bool> alone = alone_in_their_memory(tensors);
    for (const State& state : states_) {
      const at::Tensor& tensor = tensors[state.index];
      if (tensor.is_inference() && !c10::InferenceMode::is_enabled()) return py::none();
      py::tuple key = py::make_tuple(state.index, reinterpret_cast<intptr_t>(
                                                      inputs[state.index].ptr()));
      PyObject* found = PyDict_GetItem(resident_.ptr(), key.ptr());  // borrowed
      if (found == nullptr || !alone[state.index]) return py::none();
      py::object resident = py::reinterpret_borrow<py::object>(found);  // held from here
      if (!resident.attr(name.holds)(inputs[state.index]).cast<bool>()) return py::none();
      residents.push_back(std::move(resident));
      keys.push_back(std::move(key));
    }

    py::list arguments(tensors.size());
    for (const Staged& staged : staged_) {
      const at::Tensor& tensor = tensors[staged.index];
      if (staged.whole && tensor.is_contiguous()) {  // its bytes are its values
        for (void* address : staged.addresses)
          std::memcpy(address, tensor.data_ptr(), staged.nbytes);
        arguments[staged.index] = staged.array;
      } else {
        arguments[staged.index] = staged.stage(inputs[staged.index]);
      }
    }
    for (int64_t i : lent_) arguments[i] = on_devices_(i, inputs[i]);
    for (size_t s = 0; s < states_.size(); ++s)
      arguments[states_[s].index] = residents[s].attr(name.array);

    py::tuple returned;
    try {
      returned = compiled_(*arguments);
    } catch (py::error_already_set&) {
      // the states leave the table: the caller's tensors, not written, are the state
      for (const py::tuple& key : keys) PyDict_DelItem(resident_.ptr(), key.ptr());
      throw;
    }
    py::list results(order_.size());
    for (size_t p = 0; p < order_.size(); ++p) {
      py::object value = returned[p];
      value.attr(name.block)();
      results[order_[p]] = value;
    }

    for (size_t s = 0; s < states_.size(); ++s) {
      const State& state = states_[s];
      if (state.in_python) {
        keep_(state.index, inputs, results);
        continue;
      }
      const at::Tensor& tensor = tensors[state.index];
      py::object array = results[state.result];
      if (tensor.numel() > 0) {
        py::list shards = array.attr(name.arrays);
        std::vector<const uint8_t*> at(shards.size(), nullptr);
        for (const std::vector<Start>& write : state.writes) {
          Box region;
          bool skipped = false;  // a scatter's window out of bounds
          for (const Start& start : write) {
            Int first = start.scalar ? (*start.scalar)(tensors) : Int(start.constant);
            if (start.clamps)  // as the op does
              first = std::min<Int>(std::max<Int>(first, 0), start.length - start.size);
            else if (first < 0 || first + start.size > start.length)
              skipped = true;
            region.push_back({static_cast<int64_t>(first),
                              static_cast<int64_t>(first) + start.size});
          }
          if (skipped) {  // XLA's choice: all of it, as spmd.writes.written does
            region.clear();
            for (const Start& start : write) region.push_back({0, start.length});
          }
          for (int64_t p : state.distinct) {
            if (at[p] == nullptr)
              at[p] = reinterpret_cast<const uint8_t*>(buffer_pointer(shards[p]));
            copy_from_shard(tensor, region, at[p], state.boxes[p]);
          }
        }
      }
      torch::autograd::impl::bump_version(tensor);
      // the tensor's state on the devices is the new one (spmd.placement.Resident)
      residents[s].attr(name.array) = array;
      residents[s].attr(name.version) = tensor._version();
    }

    // a result that is state is the caller's tensor, as eager returns it; the others
    // are replicated: any device holds all of it
    py::list out(count_);
    for (const auto& [result, argument] : returned_state_) out[result] = inputs[argument];
    for (const Result& result : results_)
      out[result.index] = wrap(tensor_over(
          results[result.index].attr(name.replicated)(), result));
    return std::move(out);
  }

 private:
  py::object compiled_;
  std::vector<Layout> layouts_;
  std::vector<int64_t> written_, order_, lent_;
  int64_t count_;
  std::vector<std::pair<int64_t, int64_t>> returned_state_;  // (result, argument)
  std::vector<Result> results_;
  std::vector<State> states_;
  std::vector<Staged> staged_;
  py::object resident_, on_devices_, keep_, acquire_, release_;
};

}  // namespace

void bind_sharded_call(py::module_& m) {
  m.def(
      "evaluate",
      [](py::handle scalar, py::sequence inputs) {
        std::vector<at::Tensor> tensors;
        for (py::handle input : inputs) tensors.push_back(THPVariable_Unpack(input.ptr()));
        Int value = Scalar::from(scalar)(tensors);
        return value < 0 ? py::int_(static_cast<int64_t>(value))
                         : py::int_(static_cast<uint64_t>(value));
      },
      "A host_scalars.Scalar of contiguous arguments evaluated as a sharded call does (for "
      "tests)",
      py::arg("scalar"), py::arg("inputs"));
  py::class_<ShardedCall>(m, "ShardedCall")
      .def(py::init<py::object>(), py::arg("plan"))
      .def("__call__", &ShardedCall::call, py::arg("inputs"));
}

}  // namespace outofplace
