"""The consumer's record decoding in C, the one thing pyproject.toml does not declare (its
ext-modules table is still experimental in setuptools). Optional: without a working C compiler
the wheel still builds, says so, and exactly.client.decode decodes in Python (same records,
slower); with one, the wheel carries exactly/client/_decode.*.so."""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into one clear message instead of an error."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, CompileError, ExecError, LinkError, PlatformError) as e:
            print(f"exactly: building the C decoder {ext.name} failed ({e}); installing without "
                  "it: the pure-Python decoder reads the same records, slower. To build it, "
                  "install a C compiler and Python's headers (Debian: apt-get install gcc "
                  "python3-dev) and reinstall.", file=sys.stderr)


setup(ext_modules=[Extension("exactly.client._decode", ["src/exactly/client/_decode.c"],
                             optional=True)],
      cmdclass={"build_ext": OptionalBuildExt})
