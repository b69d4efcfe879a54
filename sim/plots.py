"""Matplotlib for the reproductions and the sweeps: a pyplot that needs no display, and the one way
a figure is written.

``memwall/`` uses these too (it may import ``sim/``; ``sim/`` may not import ``memwall/``).
Matplotlib is imported on the first call, so importing this module costs nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pyplot", "save_figure"]


def pyplot():
    """Return ``matplotlib.pyplot`` on the Agg backend (files only, no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, *, dpi: int = 110, fmt: str | None = None) -> Path:
    """Write ``fig`` to ``path`` as ``fmt`` and close it; return the path written.

    The file appears whole: it is written under a temporary name beside it, then renamed.
    Without ``fmt`` the path's suffix names the format, and a path without one gets ``.png``
    (as ``Figure.savefig`` does).
    """
    path = Path(path)
    if fmt is None:
        path = path if path.suffix else path.with_name(f"{path.name}.png")
        fmt = path.suffix[1:]
    partial = path.with_name(f".{path.name}.partial")
    try:
        fig.savefig(partial, dpi=dpi, format=fmt)
        os.replace(partial, path)
    finally:
        pyplot().close(fig)
        partial.unlink(missing_ok=True)
    return path
