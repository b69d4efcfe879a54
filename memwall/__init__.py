"""memwall: generator and verification suite for edge-LLM memory-wall hardware."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["__version__", "version_line"]

try:
    __version__ = metadata.version("memwall")
except metadata.PackageNotFoundError:     # run from a checkout that was never installed
    __version__ = "unknown"


def version_line() -> str:
    """``memwall 0.1.0``, with the commit (and ``-dirty``) when run from a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty",
                                 "--abbrev=10", "--exclude", "*"], capture_output=True,
                                text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        commit = None
    where = f" (commit {commit.stdout.strip()})" if commit and commit.returncode == 0 else ""
    return f"memwall {__version__}{where}"
