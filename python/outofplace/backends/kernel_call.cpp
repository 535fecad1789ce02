// A custom op's own CPU kernel, called inside an XLA:CPU program (backends/kernels.py).
//
// transforms/kernel_calls.py lowers a call of a custom op (`torch.library.custom_op`,
// `torch.library.define`, a C++ op) to `stablehlo.custom_call @"ns::op"` with typed-FFI
// attributes: the op's name (`outofplace.op`), the schema positions of the tensor
// arguments (`outofplace.tensors`), the operand each is (`outofplace.operands`; two
// arguments viewing one root are one operand) and where it lies in it
// (`outofplace.view.<position>`), the result aliasing each operand
// (`outofplace.results`), and each non-tensor argument under its schema name.
// transforms/convolutions_as_kernel_calls.py adds two: a tensor argument the op reads
// only the sizes of (`outofplace.unread.<position>` = its sizes: an uninitialized tensor,
// no operand), which of the op's returns are the call's results (`outofplace.returns`,
// default: every return that aliases no argument), and a result written permuted
// (`outofplace.permute.<result>`: XLA's buffer holds `permute` of the op's return).
// transforms/composites_as_kernel_calls.py and dots_as_kernel_calls.py add one: an out= argument
// (`outofplace.out.<position>` = the result whose buffer it is: the op writes it there).
// This one handler, registered for every such target, wraps XLA's buffers as CPU tensors
// (from_blob, no copy) and calls the op through the c10 dispatcher on the thread that
// called the program when it was called through `at_home` (kernel_home.h: the caller's
// OpenMP team, as in eager), without the GIL: a Python kernel takes it itself (torch's
// PythonKernelHolder, as on autograd's threads), a C++ one runs without it. Results: the
// op's own tensor results (computed in XLA's result buffers where an ATen kernel's own
// allocation can be lent them, `Lender`; else copied there), then one per argument it
// writes, which aliases that operand (`output_operand_aliases`): XLA hands the operand's
// buffer as the result buffer, so the kernel writes it in place; where XLA gave another
// buffer (it kept the operand for a later read), the operand is copied into it first and
// that is written.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kernel_home.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The first kernel failure since the last `take_failure` (see call_kernel).
std::mutex failure_mutex;
std::string failure;

std::optional<at::ScalarType> scalar_type(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::PRED: return at::kBool;
    case ffi::DataType::S8: return at::kChar;
    case ffi::DataType::S16: return at::kShort;
    case ffi::DataType::S32: return at::kInt;
    case ffi::DataType::S64: return at::kLong;
    case ffi::DataType::U8: return at::kByte;
    case ffi::DataType::F16: return at::kHalf;
    case ffi::DataType::BF16: return at::kBFloat16;
    case ffi::DataType::F32: return at::kFloat;
    case ffi::DataType::F64: return at::kDouble;
    case ffi::DataType::C64: return at::kComplexFloat;
    case ffi::DataType::C128: return at::kComplexDouble;
    default: return std::nullopt;
  }
}

// The value, or a runtime_error with XLA's message (std::get would say nothing useful).
template <typename T>
T need(ffi::ErrorOr<T> value, const std::string& what) {
  if (value.has_error()) throw std::runtime_error(what + ": " + value.error().message());
  return std::move(value).value();
}

at::Tensor over(const ffi::AnyBuffer& buffer, void* data) {
  auto dims = buffer.dimensions();
  std::vector<int64_t> sizes(dims.begin(), dims.end());
  auto type = scalar_type(buffer.element_type());
  if (!type) throw std::runtime_error("a buffer of an element type torch has no dtype for");
  return at::from_blob(data, sizes, at::TensorOptions().dtype(*type).device(at::kCPU));
}

// Results lent to the kernel's own allocations. A kernel allocates its results itself
// (`at::empty`; oneDNN's NCHW convolution computes into a blocked buffer, then reorders
// it into a dense one it allocates), and the handler then copied each into XLA's result
// buffer (53 results a step of ResNet-18's 64x64 training). Instead, the CPU
// allocator (`Lender`, installed over torch's at the first call) hands XLA's result
// buffer to the allocation that became that result the last two times the same call ran
// (same op, same sizes: `Call::key`), counted on the calling thread during the call.
// Only ATen's ops are lent to (a custom op's kernel may keep what it returns; ATen's do
// not). Whether it did is checked after the kernel returns (the returned tensor is XLA's
// buffer, dense, of its type): if not (a scratch of the same size took it), the result
// is copied as before (out of a copy where it overlaps the buffer) and the allocation
// that became it is learned again. A lent buffer is never freed to torch's allocator;
// one still held after the call (a kernel that kept its scratch) stops all lending.
struct Loan {
  void* data;
  size_t bytes;
  int64_t index;  // the allocation, counted on the calling thread during the call
  bool taken = false;
};

struct Lending {
  bool active = false;
  int64_t count = 0;  // allocations so far in this call
  std::vector<Loan>* loans = nullptr;
  std::vector<void*> seen;  // each allocation's memory, in order
};
thread_local Lending lending;

std::mutex loans_mutex;
std::unordered_set<void*> out_on_loan;  // lent buffers a tensor still holds
std::atomic<bool> lending_stopped{false};
std::atomic<int64_t> lent_results{0};  // results computed in a lent buffer

void return_loan(void* data) {
  std::lock_guard<std::mutex> lock(loans_mutex);
  out_on_loan.erase(data);
}

class Lender final : public c10::Allocator {
 public:
  explicit Lender(c10::Allocator* inner) : inner_(inner), inner_raw_(inner->raw_deleter()) {}

  c10::DataPtr allocate(size_t bytes) override {
    if (!lending.active) return inner_->allocate(bytes);
    int64_t index = lending.count++;
    for (Loan& loan : *lending.loans) {
      if (loan.index != index || loan.taken || loan.bytes != bytes) continue;
      loan.taken = true;
      {
        std::lock_guard<std::mutex> lock(loans_mutex);
        out_on_loan.insert(loan.data);
      }
      lending.seen.push_back(loan.data);
      // (context == data: `raw_allocate`, oneDNN's allocations, releases the context)
      return c10::DataPtr(loan.data, loan.data, &return_loan, c10::Device(c10::kCPU));
    }
    c10::DataPtr data = inner_->allocate(bytes);
    lending.seen.push_back(data.get());
    return data;
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

  static Lender* installed;

 private:
  // `raw_deallocate` of either kind: a loan returned, or the inner allocator's memory
  static void raw_delete(void* data) {
    {
      std::lock_guard<std::mutex> lock(loans_mutex);
      if (out_on_loan.erase(data)) return;
    }
    installed->inner_raw_(data);
  }

  c10::Allocator* inner_;
  c10::DeleterFnPtr inner_raw_;
};
Lender* Lender::installed = nullptr;

void install_lender() {
  static std::once_flag once;
  std::call_once(once, []() {
    c10::Allocator* inner = c10::GetCPUAllocator();
    if (inner->raw_deleter() == nullptr) {  // (not torch's default: lend nothing)
      lending_stopped = true;
      return;
    }
    Lender::installed = new Lender(inner);  // (never freed: torch's tensors refer to it)
    c10::SetCPUAllocator(Lender::installed, /*priority=*/255);
  });
}

// The allocation that became each result the last time a call of the same key ran, and
// whether the call before found the same (only then is it lent: an allocation a
// kernel makes on its first call only, a cache's, shifts the count once).
struct Learned {
  std::vector<int64_t> became;
  bool confirmed = false;
};
std::mutex learned_mutex;
std::unordered_map<std::string, Learned> learned;

// A non-tensor argument from the attributes, as the schema types it; None when absent.
c10::IValue attribute(const ffi::Dictionary& attrs, const c10::Argument& argument) {
  const std::string& name = argument.name();
  c10::TypePtr type = argument.type();
  if (!attrs.contains(name)) {
    if (argument.default_value()) return *argument.default_value();
    if (type->kind() == c10::TypeKind::OptionalType) return c10::IValue();
    throw std::runtime_error("no value for the argument '" + name + "'");
  }
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
    case c10::TypeKind::ScalarTypeType:
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
      return need(attrs.get<int64_t>(name), name);
    case c10::TypeKind::FloatType:
      return need(attrs.get<double>(name), name);
    case c10::TypeKind::BoolType:
      return need(attrs.get<bool>(name), name);
    case c10::TypeKind::StringType:
      return std::string(need(attrs.get<std::string_view>(name), name));
    case c10::TypeKind::NumberType:
      if (attrs.contains<int64_t>(name)) return need(attrs.get<int64_t>(name), name);
      if (attrs.contains<bool>(name)) return need(attrs.get<bool>(name), name);
      return need(attrs.get<double>(name), name);
    case c10::TypeKind::ListType: {
      auto element = type->castRaw<c10::ListType>()->getElementType()->kind();
      if (element == c10::TypeKind::IntType || element == c10::TypeKind::SymIntType) {
        auto span = need(attrs.get<ffi::Span<const int64_t>>(name), name);
        return std::vector<int64_t>(span.begin(), span.end());
      }
      if (element == c10::TypeKind::BoolType) {  // (given as integers)
        auto span = need(attrs.get<ffi::Span<const int64_t>>(name), name);
        c10::List<bool> flags;
        for (int64_t flag : span) flags.push_back(flag != 0);
        return flags;
      }
      if (element == c10::TypeKind::FloatType) {
        auto span = need(attrs.get<ffi::Span<const double>>(name), name);
        return std::vector<double>(span.begin(), span.end());
      }
      break;
    }
    default:
      break;
  }
  throw std::runtime_error("the argument '" + name + "' has a type (" + type->str() +
                           ") outofplace does not pass to kernels");
}

// A kernel's call read off XLA's call frame, which lives only as long as the handler:
// the op, its arguments over XLA's buffers, its results' buffers, and the operands to
// copy first (a written one whose buffer XLA keeps for a later read).
struct Call {
  std::string op_name;
  std::optional<c10::OperatorHandle> handle;
  torch::jit::Stack stack;
  std::vector<int64_t> returned;     // the returns that are XLA's results, in order
  std::vector<at::Tensor> results;   // over XLA's result buffers, one per returned
  std::vector<std::vector<int64_t>> permutes;  // per result: the return's, or none
  struct Copy {
    void* to;
    const void* from;
    size_t bytes;
  };
  std::vector<Copy> copies;
  std::string key;  // the op and its operands' and results' sizes (`learned`), where
                    // it `lends`
};

// Whether the call's results may be lent (`Lender`): ATen's ops only, while lending is on.
bool lends(const Call& call) {
  return !lending_stopped && call.op_name.rfind("aten::", 0) == 0;
}

// Throws where the frame cannot be read (the op not registered any more, an attribute
// of the wrong type): the call fails XLA's execution.
std::shared_ptr<Call> read_call(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                ffi::Dictionary attrs) {
  auto call = std::make_shared<Call>();
  call->op_name =
      std::string(need(attrs.get<std::string_view>("outofplace.op"), "outofplace.op"));
  const std::string& op_name = call->op_name;
  auto tensors = need(attrs.get<ffi::Span<const int64_t>>("outofplace.tensors"),
                      "outofplace.tensors");
  auto operand_of = need(attrs.get<ffi::Span<const int64_t>>("outofplace.operands"),
                         "outofplace.operands");
  auto result_of = need(attrs.get<ffi::Span<const int64_t>>("outofplace.results"),
                        "outofplace.results");
  auto dot = op_name.find('.', op_name.find("::"));
  std::string name = op_name.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : op_name.substr(dot + 1);
  call->handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  const auto& schema = call->handle->schema();
  if (attrs.contains("outofplace.returns")) {
    auto chosen = need(attrs.get<ffi::Span<const int64_t>>("outofplace.returns"),
                       "outofplace.returns");
    call->returned.assign(chosen.begin(), chosen.end());
  } else {
    for (size_t i = 0; i < schema.returns().size(); ++i)
      if (schema.returns()[i].alias_info() == nullptr) call->returned.push_back(i);
  }
  for (size_t result = 0; result < call->returned.size(); ++result) {
    auto out = need(rets.get<ffi::AnyBuffer>(result), "a result");
    call->results.push_back(over(*out, out->untyped_data()));
    std::string permute = "outofplace.permute." + std::to_string(result);
    std::vector<int64_t> dims;
    if (attrs.contains(permute)) {
      auto given = need(attrs.get<ffi::Span<const int64_t>>(permute), permute);
      dims.assign(given.begin(), given.end());
    }
    call->permutes.push_back(std::move(dims));
  }
  if (lends(*call)) {  // (the key of what it learned)
    call->key = op_name;
    auto add_sizes = [&](const ffi::AnyBuffer& buffer) {
      call->key += ';';
      for (int64_t size : buffer.dimensions()) call->key += std::to_string(size) + ',';
    };
    for (size_t k = 0; k < args.size(); ++k)
      add_sizes(need(args.get<ffi::AnyBuffer>(k), "an operand"));
    for (size_t result = 0; result < call->returned.size(); ++result)
      add_sizes(*need(rets.get<ffi::AnyBuffer>(result), "a result"));
  }
  // Each operand as a tensor over XLA's memory: a written one over its result's buffer,
  // which XLA makes the operand's own (the alias), or a copy of it where XLA kept the
  // operand for a later read.
  std::vector<at::Tensor> bases;
  for (size_t k = 0; k < args.size(); ++k) {
    auto arg = need(args.get<ffi::AnyBuffer>(k), "an operand");
    int64_t r = k < result_of.size() ? result_of[k] : -1;
    if (r < 0) {
      bases.push_back(over(arg, arg.untyped_data()));
      continue;
    }
    auto ret = need(rets.get<ffi::AnyBuffer>(r), "a result");
    if (ret->untyped_data() != arg.untyped_data())
      call->copies.push_back({ret->untyped_data(), arg.untyped_data(), arg.size_bytes()});
    bases.push_back(over(*ret, ret->untyped_data()));
  }
  // The schema's arguments: a tensor is its operand, or a view of it (its place in the
  // root: `outofplace.view.<position>` = offset, sizes, strides); the others attributes.
  size_t next_tensor = 0;
  for (size_t position = 0; position < schema.arguments().size(); ++position) {
    const auto& argument = schema.arguments()[position];
    if (next_tensor >= tensors.size() || tensors[next_tensor] != int64_t(position)) {
      std::string out = "outofplace.out." + std::to_string(position);
      if (attrs.contains(out)) {  // an out= argument: XLA's result buffer, written there
        auto ret = need(rets.get<ffi::AnyBuffer>(need(attrs.get<int64_t>(out), out)), out);
        call->stack.emplace_back(over(*ret, ret->untyped_data()));
        continue;
      }
      std::string unread = "outofplace.unread." + std::to_string(position);
      if (attrs.contains(unread)) {  // only its sizes are read: no memory written
        auto sizes = need(attrs.get<ffi::Span<const int64_t>>(unread), unread);
        call->stack.emplace_back(at::empty(std::vector<int64_t>(sizes.begin(), sizes.end()),
                                           bases.at(0).options()));
      } else {
        call->stack.emplace_back(attribute(attrs, argument));
      }
      continue;
    }
    at::Tensor base = bases.at(operand_of[next_tensor++]);
    std::string key = "outofplace.view." + std::to_string(position);
    if (!attrs.contains(key)) {
      call->stack.emplace_back(base);
      continue;
    }
    auto view = need(attrs.get<ffi::Span<const int64_t>>(key), key);
    size_t rank = (view.size() - 1) / 2;
    std::vector<int64_t> sizes(view.begin() + 1, view.begin() + 1 + rank);
    std::vector<int64_t> strides(view.begin() + 1 + rank, view.end());
    call->stack.emplace_back(base.as_strided(sizes, strides, view[0]));
  }
  return call;
}

// A kernel that raises does not fail XLA's execution: XLA would drop the buffers it was
// donated, the caller's tensors among them. The failure is recorded instead, the
// kernel's own results are zeros, and Python raises it once XLA has run
// (custom_calls.raise_failure), the written buffers still the caller's memory, as the
// kernel left them (a kernel that checks its arguments before writing leaves them as
// they were).
void run_call(Call& call) {
  for (const Call::Copy& copy : call.copies) std::memcpy(copy.to, copy.from, copy.bytes);
  // Each result's buffer lent to the allocation that became it last time (`Lender`)
  std::vector<Loan> loans;
  std::vector<int64_t> became;
  bool lend = lends(call);
  if (lend) {
    install_lender();
    std::lock_guard<std::mutex> lock(learned_mutex);
    auto found = learned.find(call.key);
    if (found != learned.end() && found->second.confirmed) became = found->second.became;
  }
  for (size_t result = 0; result < became.size(); ++result) {
    at::Tensor& target = call.results[result];
    if (became[result] >= 0 && call.permutes[result].empty() && target.nbytes() > 0 &&
        reinterpret_cast<uintptr_t>(target.data_ptr()) % 64 == 0)
      loans.push_back({target.data_ptr(), target.nbytes(), became[result]});
  }
  Lending outer = std::move(lending);  // (a kernel that runs a program calling kernels)
  lending = Lending{lend, 0, &loans, {}};
  try {
    try {
      call.handle->callBoxed(call.stack);  // (no GIL: see the top of this file)
    } catch (pybind11::error_already_set& error) {  // (what() takes the GIL)
      throw std::runtime_error(error.what());
    }
    lending.active = false;
    std::vector<int64_t> now(call.returned.size(), -1);
    bool relearn = false;
    for (size_t result = 0; result < call.returned.size(); ++result) {
      at::Tensor value = call.stack.at(call.returned[result]).toTensor();
      if (!call.permutes[result].empty()) value = value.permute(call.permutes[result]);
      at::Tensor& target = call.results[result];
      bool dense = value.is_contiguous() && value.scalar_type() == target.scalar_type() &&
                   value.sizes() == target.sizes();
      void* storage = value.storage().data_ptr().get();
      for (size_t index = 0; index < lending.seen.size(); ++index)
        if (lending.seen[index] == storage && dense && value.storage_offset() == 0)
          now[result] = int64_t(index);
      relearn |= result >= became.size() || now[result] != became[result];
      if (value.data_ptr() == target.data_ptr() && dense) {  // computed in XLA's buffer
        for (const Loan& loan : loans) lent_results += loan.taken && loan.data == storage;
        continue;
      }
      if (storage == target.data_ptr()) value = value.clone();  // (a view of the loan)
      if (!outofplace::at_home_now() && dense)
        std::memcpy(target.data_ptr(), value.data_ptr(), target.nbytes());  // (on XLA's
      else  // thread: copy_ would start an OpenMP team there; at home, its team's threads)
        target.copy_(value);
    }
    if (relearn && lend) {
      std::lock_guard<std::mutex> lock(learned_mutex);
      Learned& entry = learned[call.key];
      entry.confirmed = entry.became == now;
      entry.became = std::move(now);
    }
  } catch (const std::exception& error) {
    lending.active = false;
    {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (failure.empty()) failure = "the kernel " + call.op_name + " failed: " + error.what();
    }
    for (at::Tensor& result : call.results)  // its own results: zeros
      std::memset(result.data_ptr(), 0, result.nbytes());
  }
  call.stack.clear();
  lending = std::move(outer);
  for (const Loan& loan : loans) {
    std::lock_guard<std::mutex> lock(loans_mutex);
    if (loan.taken && out_on_loan.count(loan.data))  // a kernel kept it (its free a
      lending_stopped = true;                          // no-op): never lend again
  }
}

// The call read here, on XLA's thread; the kernel run at home (kernel_home.h): XLA goes
// on with what does not wait for it, and what does continues where it ran.
ffi::Future call_kernel(ffi::RemainingArgs args, ffi::RemainingRets rets,
                        ffi::Dictionary attrs) {
  ffi::Promise promise;
  ffi::Future future(promise);
  std::shared_ptr<Call> call;
  try {
    call = read_call(args, rets, attrs);
  } catch (const std::exception& error) {
    std::string op_name = "";
    auto op = attrs.get<std::string_view>("outofplace.op");
    if (!op.has_error()) op_name = std::string(op.value());
    promise.SetError(ffi::Error::Internal("outofplace could not call the kernel " + op_name +
                                          ": " + error.what()));
    return future;
  }
  outofplace::run_at_home([call, promise]() mutable {
    run_call(*call);
    call.reset();
    promise.SetAvailable();
  });
  return future;
}

}  // namespace

// A C++ kernel with `Tensor(a!)` in its schema, the example the tests and the bench
// (bench/custom_kernels.py) compile beside Python ones: rows of a cache at `slots`
// become `rows` (a paged-cache writer).
TORCH_LIBRARY(outofplace_demo, m) {
  m.def("write_rows_(Tensor(a!) cache, Tensor slots, Tensor rows) -> ()");
}

TORCH_LIBRARY_IMPL(outofplace_demo, CPU, m) {
  m.impl("write_rows_", [](at::Tensor cache, const at::Tensor& slots, const at::Tensor& rows) {
    cache.index_copy_(0, slots, rows);
  });
}

TORCH_LIBRARY_IMPL(outofplace_demo, Meta, m) {
  m.impl("write_rows_", [](at::Tensor, const at::Tensor&, const at::Tensor&) {});
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(OutofplaceKernelCall, call_kernel,
                              ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attrs());

PYBIND11_MODULE(_kernel_call, m) {
  m.doc() = "The XLA FFI handler that runs custom ops' CPU kernels (backends/kernel_call.cpp)";
  m.def("handler", []() {
    return pybind11::capsule(reinterpret_cast<void*>(&OutofplaceKernelCall));
  }, "The typed-FFI handler (a PyCapsule) to register for each custom op target on CPU");
  m.def("take_failure", []() {
    std::lock_guard<std::mutex> lock(failure_mutex);
    std::string taken;
    taken.swap(failure);
    return taken;
  }, "The first kernel failure since the last call ('' for none), cleared");
  m.def("lent_results", []() { return lent_results.load(); },
        "How many results kernels have computed in XLA's buffers lent to their allocations");
  outofplace::bind_at_home(m);
}
