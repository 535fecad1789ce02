"""The C++ extensions, built against the pinned torch; everything else about the package
is in pyproject.toml.

- `outofplace.backends._planned_call`: the planned calls (planned_call.cpp for one device,
  sharded_call.cpp for a mesh).
- `outofplace.backends._kernel_call`: the XLA FFI handler that runs custom ops' CPU kernels
  inside XLA programs (kernel_call.cpp), on the thread that called the program
  (kernel_home.cpp), built against the XLA FFI headers jaxlib ships
  (`jax.ffi.include_dir()`), only when jaxlib is importable at build time.

Each is built on its own; one that fails (no C++ compiler, no jaxlib) warns and the rest
installs: outofplace then runs the planned calls' Python twins (backends/xla,
backends/spmd), slower, and refuses at compile time to run a custom op on XLA:CPU
without the handler (backends/kernels.py)."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension


class BuildOptional(BuildExtension):
    def build_extensions(self) -> None:
        try:
            super().build_extensions()
        except Exception as error:  # noqa: BLE001 (a missing compiler fails in many ways)
            self.warn(f"the C++ extensions were not built, outofplace runs without them: "
                      f"{error}")
            self.extensions = []

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # noqa: BLE001 (one that fails leaves the others)
            self.warn(f"{ext.name} (C++) was not built, outofplace runs without it: {error}")


def _ffi_include_dir() -> str | None:
    try:
        import jax.ffi
        return jax.ffi.include_dir()
    except Exception:  # noqa: BLE001 (no jax at build time: no kernel handler)
        return None


extensions = [CppExtension("outofplace.backends._planned_call",
                           ["python/outofplace/backends/planned_call.cpp",
                            "python/outofplace/backends/sharded_call.cpp"],
                           extra_compile_args=["-O2", "-g0"])]
if _ffi_include_dir() is not None:
    extensions.append(CppExtension("outofplace.backends._kernel_call",
                                   ["python/outofplace/backends/kernel_call.cpp",
                                    "python/outofplace/backends/kernel_home.cpp"],
                                   include_dirs=[_ffi_include_dir()],
                                   extra_compile_args=["-O2", "-g0"]))

setup(ext_modules=extensions, cmdclass={"build_ext": BuildOptional})
