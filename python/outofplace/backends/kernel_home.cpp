// Kernels at home (kernel_home.h): the thread that calls a program with kernels runs
// them while a helper thread runs the program.
//
// One queue of kernels for the process, served by every thread in `at_home` now (any of
// them may run any kernel: a kernel is a function of XLA's buffers, bound to no thread).
// A thread leaves `at_home` only when its program has returned and the queue is empty,
// under the queue's lock, so a kernel is never posted where nobody serves. A kernel, and
// the part of the program that waited for it and runs on after it, run as on XLA's
// threads: under a fresh thread's thread-local state (grad mode, dispatch modes,
// profiler scopes: at::ThreadLocalState), not the caller's, and with denormals flushed
// to zero, as XLA:CPU computes.
#include "kernel_home.h"

#include <ATen/ThreadLocalState.h>

#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace outofplace __attribute__((visibility("hidden"))) {

namespace {

std::mutex mutex;                 // guards the queue, `homes` and each Job's `done`
std::condition_variable posted;   // a kernel was posted or a program returned
std::deque<std::function<void()>> kernels;
int homes = 0;                    // threads in `at_home`
thread_local bool serving = false;

const at::ThreadLocalState& fresh_state() {  // a new thread's
  static const at::ThreadLocalState* state = [] {
    const at::ThreadLocalState* made = nullptr;
    std::thread([&] { made = new at::ThreadLocalState(); }).join();
    return made;
  }();
  return *state;
}

// A program's run on a helper thread.
struct Job {
  py::object run, argument, result;
  std::optional<py::error_already_set> error;
  bool done = false;  // (under `mutex`)
};

// A thread that runs one Job at a time, kept for the next `at_home` once done.
class Helper {
 public:
  Helper() : pid_(getpid()) { std::thread([this] { loop(); }).detach(); }

  void start(Job* job) {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = job;
    wake_.notify_one();
  }

  bool forked() const { return pid_ != getpid(); }  // (threads are not forked)

 private:
  void loop() {
    {  // this thread's Python state, kept for its life
      py::gil_scoped_acquire gil;
      gil.inc_ref();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return job_ != nullptr; });
      Job* job = job_;
      job_ = nullptr;
      lock.unlock();
      {
        py::gil_scoped_acquire gil;
        try {
          job->result = job->run(job->argument);
        } catch (py::error_already_set& error) {
          job->error = std::move(error);
        } catch (const std::exception& error) {
          PyErr_SetString(PyExc_RuntimeError, error.what());
          job->error.emplace();
        } catch (...) {  // (a thread may not end on an exception: that aborts)
          PyErr_SetString(PyExc_RuntimeError, "the program failed in C++");
          job->error.emplace();
        }
      }
      {
        std::lock_guard<std::mutex> home(mutex);
        job->done = true;
      }
      posted.notify_all();
      lock.lock();
    }
  }

  const pid_t pid_;
  std::mutex mutex_;
  std::condition_variable wake_;
  Job* job_ = nullptr;
};

std::mutex idle_mutex;
std::vector<Helper*> idle;  // (never freed: each is a thread waiting for its next Job)

Helper* take_helper() {
  std::lock_guard<std::mutex> lock(idle_mutex);
  while (!idle.empty()) {
    Helper* helper = idle.back();
    idle.pop_back();
    if (!helper->forked()) return helper;
  }
  return new Helper();
}

void give_back(Helper* helper) {
  std::lock_guard<std::mutex> lock(idle_mutex);
  idle.push_back(helper);
}

// Denormals flushed to zero, and read as zero, while it lives (XLA:CPU's threads').
class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }  // FTZ | DAZ
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#endif
};

// Runs the kernels posted until `job` is done and none is left.
void serve(const Job& job) {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    if (!kernels.empty()) {
      std::function<void()> kernel = std::move(kernels.front());
      kernels.pop_front();
      lock.unlock();
      {
        at::ThreadLocalStateGuard state(fresh_state());
        FlushDenormals flush;
        kernel();  // (catches its own failures: kernel_call.cpp)
      }
      lock.lock();
      continue;
    }
    if (job.done) {
      --homes;  // (under the lock that found the queue empty)
      return;
    }
    posted.wait(lock);
  }
}

py::object at_home(py::object run, py::object argument) {
  fresh_state();
  Job job{std::move(run), std::move(argument)};
  Helper* helper = take_helper();
  {
    py::gil_scoped_release release;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++homes;
    }
    bool was_serving = serving;
    serving = true;
    helper->start(&job);
    serve(job);
    serving = was_serving;
  }
  give_back(helper);
  if (job.error) throw std::move(*job.error);
  return std::move(job.result);
}

}  // namespace

void run_at_home(std::function<void()> kernel) {
  if (!serving) {
    std::unique_lock<std::mutex> lock(mutex);
    if (homes > 0) {
      kernels.push_back(std::move(kernel));
      posted.notify_all();
      return;
    }
  }
  kernel();
}

bool at_home_now() { return serving; }

void bind_at_home(py::module_& m) {
  m.def("at_home", &at_home, py::arg("run"), py::arg("argument"),
        "run(argument) on a helper thread while this thread runs the kernels the program "
        "calls (kernel_home.h): its result, or its exception raised here");
}

}  // namespace outofplace
