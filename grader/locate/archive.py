"""A ``.zip`` submission (as LMS downloads come), extracted safely.

:func:`extract` writes the archive's regular files into a fresh folder and
nothing else: no member outside it (absolute names, ``..``, drive letters
and backslashes are refused), no symbolic link, no device; at most
:data:`MAX_MEMBERS` files of at most :data:`MAX_FILE_BYTES` each and
:data:`MAX_TOTAL_BYTES` together, counted on the bytes really read (a
member that lies about its size cannot inflate past the bound), at most
:data:`MAX_DEPTH` folders deep. Hidden entries and macOS's ``__MACOSX/``
are skipped. Anything refused ends the extraction with one line saying
what to do. See docs/class-view.md.
"""
from __future__ import annotations

import lzma
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from grader.errors import GraderError
from grader.run.tempdirs import make

MAX_MEMBERS = 500
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 12
_SKIPPED = ("__MACOSX",)


class ArchiveError(GraderError):
    """A zip the grader will not extract; the message says why."""


def _shown(name: str, most: int = 80) -> str:
    """A member's name for a message: quoted, its middle cut when long."""
    if len(name) > most:
        name = f"{name[:most // 2]}...{name[-most // 2:]}"
    return repr(name)


def _member_path(info: zipfile.ZipInfo) -> PurePosixPath | None:
    """The member's path inside the folder; None for what is skipped
    (folders, hidden entries, ``__MACOSX``); raises for what is refused."""
    name = info.filename
    if "\\" in name or name.startswith("/") or ":" in name.split("/")[0]:
        raise ArchiveError(f"its member {_shown(name)} has an absolute or "
                           f"Windows path")
    path = PurePosixPath(name)
    if ".." in path.parts:
        raise ArchiveError(f"its member {_shown(name)} points outside the "
                           f"archive (..)")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise ArchiveError(f"its member {_shown(name)} is a symbolic link")
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveError(f"its member {_shown(name)} is not a regular file")
    if info.is_dir() or not path.parts:
        return None
    if any(part.startswith(".") or part in _SKIPPED for part in path.parts):
        return None
    if len(path.parts) > MAX_DEPTH:
        raise ArchiveError(f"its member {_shown(name)} is more than "
                           f"{MAX_DEPTH} folders deep")
    return path


def extract(archive: Path, into: Path) -> Path:
    """Extract the zip ``archive`` into the new folder ``into`` within the
    bounds of this module; return ``into``. Raises :class:`ArchiveError`."""
    try:
        with zipfile.ZipFile(archive) as handle:
            members = handle.infolist()
            if len(members) > MAX_MEMBERS:
                raise ArchiveError(f"it holds {len(members)} members (at "
                                   f"most {MAX_MEMBERS})")
            into.mkdir(parents=True)
            total = 0
            for info in members:
                path = _member_path(info)
                if path is None:
                    continue
                if info.flag_bits & 0x1:
                    raise ArchiveError(f"its member "
                                       f"{_shown(info.filename)} is "
                                       f"encrypted")
                with handle.open(info) as source:
                    data = source.read(MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    raise ArchiveError(
                        f"its member {_shown(info.filename)} is larger than "
                        f"{MAX_FILE_BYTES // (1024 * 1024)} MB")
                total += len(data)
                if total > MAX_TOTAL_BYTES:
                    raise ArchiveError(
                        f"it holds more than "
                        f"{MAX_TOTAL_BYTES // (1024 * 1024)} MB")
                target = into.joinpath(*path.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    raise ArchiveError(f"its member {_shown(info.filename)} "
                                       f"appears twice")
                target.write_bytes(data)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError,
            EOFError, RuntimeError, ValueError, OverflowError, zlib.error,
            lzma.LZMAError) as exc:
        # ValueError: a name flagged UTF-8 that is not (UnicodeDecodeError),
        # a header zipfile cannot read; zlib/lzma: a corrupt stream.
        raise ArchiveError(f"it is not a zip Python can read ({exc})"
                           ) from exc
    return into


def extracted(archive: Path) -> Path:
    """``archive`` extracted into a private temporary folder named after
    it, in the process's run folder (``grader.run.tempdirs``: removed
    when the process ends, however deep the archive's folders are)."""
    scratch = make("zip-")
    name = archive.name[:-len(".zip")] or "submission"
    return extract(archive, scratch / name)
