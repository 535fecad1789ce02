"""The one C++ extension, the planned call (python/outofplace/backends/planned_call.cpp),
built against the pinned torch; everything else about the package is in pyproject.toml.
Without it (a build that failed, a copied source tree) outofplace runs its Python twin."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[CppExtension("outofplace.backends._planned_call",
                              ["python/outofplace/backends/planned_call.cpp"],
                              extra_compile_args=["-O2"])],
    cmdclass={"build_ext": BuildExtension},
)
