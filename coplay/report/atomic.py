"""Writes that a kill at any moment cannot leave half done.

A file or folder is written under a temporary name next to its final one and renamed
into place; a rename within one file system is atomic, so a reader (or a resumed
run) sees the previous version or the new one, never a mixture.

Replacing a folder takes two renames (the old one aside, the new one in); a kill
between them leaves only ``<name>.old``, which ``recover_dir`` puts back.

A file's temporary is its writer's own, ``.<name>.<random>.tmp``, locked while it is
written: two writers of one file (a run's report hook and ``coplay report RUN``) each
rename a whole file into place, and a temporary that nobody holds locked is what a
killed writer left, removed at the next write of that file.

A file or folder that is a symlink (a run's ``state`` kept on another disk, a report
linked into a web folder) is replaced where it points, with its ``.tmp`` and ``.old``
beside the target, so that the renames stay on one file system and the link stays a
link.
"""

from __future__ import annotations

import fcntl
import glob
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

TMP_SUFFIX = ".tmp"
OLD_SUFFIX = ".old"


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename (fsynced: small files, worth it); a
    symlink is written through, where it points (as ``echo text > link`` would)."""
    path = _target(path)
    _remove_dead_temporaries(path)
    fd, tmp = _own_temporary(path)
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
            # Still open, so still locked: no other writer takes it for a dead one's.
            os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def _own_temporary(path: Path) -> tuple[int, Path]:
    """A new temporary beside ``path``, open for writing and locked: (fd, its name)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            return fd, tmp
        os.close(fd)  # another writer removed it as a dead one's before it was locked


def _remove_dead_temporaries(path: Path) -> None:
    """Remove the temporaries of ``path`` that killed writers left: a kill releases the
    lock, a live writer holds it. ``<name>.tmp`` is what earlier versions left."""
    pattern = f".{glob.escape(path.name)}.*{TMP_SUFFIX}"
    for tmp in [*path.parent.glob(pattern), path.with_name(path.name + TMP_SUFFIX)]:
        with suppress(OSError):  # locked (BlockingIOError), or renamed into place meanwhile
            fd = os.open(tmp, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                tmp.unlink()
            finally:
                os.close(fd)


def replace_dir(tmp: Path, final: Path) -> Path:
    """Make the finished folder ``tmp`` the new ``final``; the previous one is removed."""
    target = _target(final)
    old = target.with_name(target.name + OLD_SUFFIX)
    _remove(old)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    _remove(old)
    return Path(final)


def recover_dir(final: Path) -> bool:
    """Undo a ``replace_dir`` cut between its two renames; True if it had to.

    Whatever ``final.tmp`` holds then is unfinished or redone on resume: removed.
    """
    final = _target(final)
    old = final.with_name(final.name + OLD_SUFFIX)
    _remove(final.with_name(final.name + TMP_SUFFIX))
    if final.exists() or not old.exists():
        _remove(old)
        return False
    old.rename(final)
    return True


def _target(final: Path) -> Path:
    """The file or folder ``final`` stands for: where it points if it is a symlink
    (dangling too: a cut replace leaves it so), else itself."""
    final = Path(final)
    return Path(os.path.realpath(final)) if final.is_symlink() else final


def _remove(path: Path) -> None:
    """Remove a leftover folder; a symlink in its place is unlinked, its target kept
    (``rmtree`` refuses a symlink, and ``ignore_errors`` would hide that)."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """``with atomic_dir(folder) as tmp: save(tmp)``: ``folder`` appears, or is
    replaced, only once the block has finished without an error."""
    final = _target(final)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    _remove(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, final)
