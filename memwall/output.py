"""Output folders of the command line: checked before any work, filled only with whole files.

:func:`output_folder` refuses, in one line, a path that is a file, a special file, or a folder
that cannot be created or written. :class:`Staged` gives a command a scratch folder inside its
output folder; the command writes there, and only when it succeeds is each file moved to its
place by a rename, so an interrupted or failed run never leaves a Verilog file, manifest,
report or plot that looks complete but is not.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

__all__ = ["OutputError", "output_folder", "Staged", "STAGE_PREFIX"]

#: Suffixes of the files a command writes; an output folder named like one is refused.
FILE_SUFFIXES = (".v", ".sv", ".json", ".md", ".png", ".log", ".bit", ".svf")
#: Name prefix of the scratch folders :class:`Staged` makes (followed by the process id).
STAGE_PREFIX = ".partial-"


class OutputError(Exception):
    """An output path that cannot be used; the CLI prints it as one line with exit status 2."""


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def output_folder(path) -> Path:
    """Create ``path`` if needed and return it; raise :class:`OutputError` if it is not a folder
    this process can write."""
    if not str(path).strip():
        raise OutputError("the output folder is empty; give a folder with -o (-o . for the "
                          "current folder)")
    folder = Path(path)
    try:
        mode = folder.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"cannot create output folder {folder}: {exc.strerror}") from None
    if mode is not None and not stat.S_ISDIR(mode):
        raise OutputError(f"output folder {folder} is {_kind(mode)}, not a folder; "
                          f"give a folder (new or existing) with -o")
    if mode is None and folder.suffix.lower() in FILE_SUFFIXES:
        raise OutputError(f"output folder {folder} ends in {folder.suffix}: -o names a folder, "
                          f"and the files are written into it (<top>.v, <top>.json, ...); "
                          f"give -o {folder.parent}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create output folder {folder}: {exc.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"output folder {folder} is not writable")
    return folder


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Staged:
    """Stage a command's files in ``<folder>/.partial-<pid>`` and move them into ``folder``.

    Use as a context manager; it yields the scratch folder. On success every file under it is
    moved to the same relative place under ``folder`` (each by :func:`os.replace`, atomic on
    one file system; files already there are replaced, others are left alone) and the scratch
    folder is removed. On an interrupt (``KeyboardInterrupt``) the scratch folder is removed.
    On any other error it is kept, because the logs in it say what failed; it is removed by the
    next run into the same folder. Scratch folders of processes no longer running are removed
    on entry.
    """

    def __init__(self, folder):
        self.folder = output_folder(folder)
        self.stage = self.folder / f"{STAGE_PREFIX}{os.getpid()}"

    def final(self, path) -> Path:
        """Where a path under the scratch folder ends up once the command succeeds."""
        return self.folder / Path(path).relative_to(self.stage)

    def __enter__(self) -> Path:
        for old in self.folder.glob(f"{STAGE_PREFIX}*"):
            pid = old.name[len(STAGE_PREFIX):]
            if old.is_dir() and (not pid.isdigit() or int(pid) == os.getpid()
                                 or not _pid_alive(int(pid))):
                shutil.rmtree(old, ignore_errors=True)
        self.stage.mkdir()
        return self.stage

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self._commit()
        elif issubclass(exc_type, KeyboardInterrupt):
            shutil.rmtree(self.stage, ignore_errors=True)
        return False

    def _commit(self) -> None:
        for root, _, files in os.walk(self.stage):
            for name in files:
                source = Path(root) / name
                target = self.final(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
        shutil.rmtree(self.stage)
