"""The consumer's record decoding in C, the one thing pyproject.toml does not declare (its
ext-modules table is still experimental in setuptools). optional: without a C compiler the
install still succeeds and exactly.client.fetcher decodes in Python (same records, slower)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("exactly.client._decode", ["src/exactly/client/_decode.c"],
                             optional=True)])
