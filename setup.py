"""The one C++ extension, the planned calls (python/outofplace/backends/planned_call.cpp
for one device, sharded_call.cpp for a mesh), built against the pinned torch; everything
else about the package is in pyproject.toml. A build that fails (no C++ compiler) warns
and installs the rest: outofplace then runs the one-device planned call's Python twin
(backends/xla.py) and every sharded call in Python (backends/spmd.py), slower."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension


class BuildOptional(BuildExtension):
    def build_extensions(self) -> None:
        try:
            super().build_extensions()
        except Exception as error:  # noqa: BLE001 (a missing compiler fails in many ways)
            self.warn(f"the planned calls (C++) were not built, outofplace runs its Python "
                      f"twin: {error}")
            self.extensions = []


setup(
    ext_modules=[CppExtension("outofplace.backends._planned_call",
                              ["python/outofplace/backends/planned_call.cpp",
                               "python/outofplace/backends/sharded_call.cpp"],
                              extra_compile_args=["-O2", "-g0"])],
    cmdclass={"build_ext": BuildOptional},
)
