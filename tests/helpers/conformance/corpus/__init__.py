"""The conformance corpus: every module in this package registers its cases (harness.case) on
import, one module per API family."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
