// Kernels at home: a kernel that XLA:CPU calls inside a program runs on the thread that
// called the program, not on XLA's threads (kernel_home.cpp).
//
// Eager's kernels run their parallel loops on the OpenMP team of the thread that calls
// them. Called on XLA's threads, each of those threads would start a team of its own,
// and libgomp, once it manages more threads than the machine has cores, lets no idle
// thread of any team spin before it sleeps (its throttled spin count): every parallel
// loop of the process, eager's beside the compiled program and the kernels' own, then
// waits on a futex to start (eager's ResNet-18 training step: 102 ms against 64 ms once
// a kernel had run on XLA's threads). So a program that calls eager's convolutions or
// matrix products is run by a helper thread (`at_home`; custom_calls.at_home chooses) while the thread
// that called it runs the kernels XLA's threads hand it (`run_at_home`): one OpenMP
// team in the process, the caller's, as in eager.
// The handler returns a future the kernel completes, so XLA's threads go on with what
// does not wait for the kernel, and what does runs on where the kernel ran.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>

namespace outofplace __attribute__((visibility("hidden"))) {

// Runs `kernel` on a thread in `at_home` (later, not waiting for it), or here and now
// when this thread is one or none is (a program started otherwise).
void run_at_home(std::function<void()> kernel);

// Whether this thread is in `at_home` (its OpenMP team is the process's).
bool at_home_now();

// Adds `at_home(run, argument)` to the extension: `run(argument)` on a helper thread,
// this thread running the kernels meanwhile; its result, or its exception raised here.
void bind_at_home(pybind11::module_& m);

}  // namespace outofplace
