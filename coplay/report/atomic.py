"""Writes that a kill at any moment cannot leave half done.

A file or folder is written under a temporary name next to its final one and renamed
into place; a rename within one file system is atomic, so a reader (or a resumed
run) sees the previous version or the new one, never a mixture.

Replacing a folder takes two renames (the old one aside, the new one in); a kill
between them leaves only ``<name>.old``, which ``recover_dir`` puts back.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

TMP_SUFFIX = ".tmp"
OLD_SUFFIX = ".old"


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename (fsynced: small files, worth it)."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def replace_dir(tmp: Path, final: Path) -> Path:
    """Make the finished folder ``tmp`` the new ``final``; the previous one is removed."""
    old = final.with_name(final.name + OLD_SUFFIX)
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def recover_dir(final: Path) -> bool:
    """Undo a ``replace_dir`` cut between its two renames; True if it had to.

    Whatever ``final.tmp`` holds then is unfinished or redone on resume: removed.
    """
    old = final.with_name(final.name + OLD_SUFFIX)
    shutil.rmtree(final.with_name(final.name + TMP_SUFFIX), ignore_errors=True)
    if final.exists() or not old.exists():
        shutil.rmtree(old, ignore_errors=True)
        return False
    old.rename(final)
    return True


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """``with atomic_dir(folder) as tmp: save(tmp)``: ``folder`` appears, or is
    replaced, only once the block has finished without an error."""
    final = Path(final)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, final)
