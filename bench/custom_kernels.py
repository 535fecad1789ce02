"""A paged-cache write through a custom kernel against the same write by `index_copy_`.

    .venv/bin/python bench/custom_kernels.py            # the section, on stdout
    .venv/bin/python bench/run.py --sections custom-kernels --output docs/performance.md

The kernel is a `torch.library.custom_op` with `mutates_args=("cache",)` whose CPU
implementation is `cache.index_copy_(0, slots, rows)`, or the same in C++
(`outofplace_demo::write_rows_`, backends/kernel_call.cpp): compiled, it is a custom_call
XLA:CPU runs through outofplace's FFI handler, which calls the op on XLA's buffer of the
pool (the caller's tensor) through the dispatcher, GIL taken. The same program with
`index_copy_` written inline compiles to one scatter. Both write 16
rows of a pool of pages [pages, 16, 1024] float32 seen as rows (`view(-1, 1024)`), once a
call; medians of calls made as a user makes them.
"""


import os
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calls import median_time  # noqa: E402

PAGE, WIDTH, ROWS = 16, 1024, 16


def _programs():
    import torch

    @torch.library.custom_op("bench::write_rows", mutates_args=("cache",))
    def write_rows(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
        cache.index_copy_(0, slots, rows)

    def through_kernel(pool, slots, rows):
        write_rows(pool.view(-1, WIDTH), slots, rows)

    def through_index_copy(pool, slots, rows):
        pool.view(-1, WIDTH).index_copy_(0, slots, rows)

    from outofplace.backends import custom_calls
    custom_calls.extension()  # registers outofplace_demo::write_rows_ (kernel_call.cpp)

    def through_cpp_kernel(pool, slots, rows):
        torch.ops.outofplace_demo.write_rows_(pool.view(-1, WIDTH), slots, rows)

    return {"custom kernel (Python)": through_kernel,
            "custom kernel (C++)": through_cpp_kernel,
            "index_copy_": through_index_copy}


def measure(mib: int, log: Callable[[str], None]) -> list[dict[str, Any]]:
    import torch

    import outofplace

    pages = mib * 2**20 // (PAGE * WIDTH * 4)
    rows = []
    for name, program in _programs().items():
        log(f"custom kernels: {name}, {mib} MiB")
        g = torch.Generator().manual_seed(0)
        slots = torch.randperm(pages * PAGE, generator=g)[:ROWS]
        k = torch.randn(ROWS, WIDTH, generator=g)
        pool, eager_pool = torch.zeros(pages, PAGE, WIDTH), torch.zeros(pages, PAGE, WIDTH)
        compiled = outofplace.compile(program, (pool, slots, k))
        compiled_time = median_time(lambda: compiled(pool, slots, k))
        eager_time = median_time(lambda: program(eager_pool, slots, k))
        other = torch.randperm(pages * PAGE, generator=g)[:ROWS]
        compiled(pool, other, k * 2)
        program(eager_pool, other, k * 2)
        rows.append({"program": name, "mib": mib, "eager": eager_time,
                     "outofplace": compiled_time, "correct": torch.equal(pool, eager_pool),
                     "report": compiled.in_place_report["pool"]})
    return rows


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def render(rows: list[dict[str, Any]], load: tuple) -> str:
    lines = ["## Custom kernels", "",
             "A paged-cache write (16 rows of 1024 float32 into a pool of pages [pages, 16, "
             "1024] seen as rows, `view(-1, 1024)`) through a `torch.library.custom_op` "
             "kernel whose CPU implementation is `index_copy_` (Python), or a C++ op doing "
             "the same (`outofplace_demo::write_rows_`), against the same write by "
             "`index_copy_` in the program (bench/custom_kernels.py). Compiled, the kernel "
             "is a custom_call XLA:CPU runs through outofplace's FFI handler, which calls "
             "the op on XLA's buffer of the pool through the dispatcher (the GIL taken); "
             "`index_copy_` is one scatter. The pool is the kernel's operand itself, "
             "aliased: a call costs the same at both sizes. Medians of calls as a "
             f"user makes them. Load average over the run: {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f}.", "",
             "| write | pool | eager | outofplace | outofplace / eager | pool after calls "
             "| in_place_report |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['program']} | {r['mib']} MiB | {_us(r['eager'])} | "
                     f"{_us(r['outofplace'])} | {r['outofplace'] / r['eager']:.2f}x | "
                     f"{'eager' if r['correct'] else 'DIFFERS'} | {r['report']} |")
    return "\n".join(lines) + "\n"


def run(sizes: tuple[int, ...] = (16, 256), log: Callable[[str], None] = lambda m: None
        ) -> str:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    rows = [row for mib in sizes for row in measure(mib, log)]
    return render(rows, os.getloadavg())


if __name__ == "__main__":
    sys.stdout.write(run(log=lambda m: print(m, file=sys.stderr, flush=True)))
