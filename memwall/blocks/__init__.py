"""Registry entries of every block: each module in this package registers its blocks on import
(`units` holds what the shared numeric units build, for the size estimates)."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
