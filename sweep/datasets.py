"""`python -m sweep data fetch cifar10`: CIFAR-10 downloaded, verified and unpacked where the loader reads it.

- Download (sweep/download.py): into DIR/cifar-10-python.tar.gz.part, which the loader never reads,
  resumable, at most MAX_ARCHIVE_BYTES (a wrong URL cannot fill the disk).
- Verify: the archive's MD5 published by CIFAR-10's authors and its SHA-256 as Keras records it for the
  same URL (`--checksum` names another archive's). A mismatch deletes the file.
- Unpack: every member is checked before anything is written: only regular files of CIFAR-10's names
  directly under cifar-10-batches-py/, each and all within CIFAR-10's sizes. They are written into a
  temporary folder in DIR, checked by the loader (`trainables.data.load_cifar10`), and renamed into
  place: DIR/cifar-10-batches-py/ is whole or absent. The archive is streamed, never held in memory.

`run` calls `fetch_for_run` when a run needs CIFAR-10 and finds none: it fetches with --fetch-data or
after a yes on a terminal, and otherwise names the command to run. Nothing is fetched silently.
"""
from __future__ import annotations

import gzip
import os
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, TextIO
from urllib.parse import urlsplit

from sweep.download import CHUNK, MIB, download, locked, mismatch
from sweep.errors import FetchError
from sweep.location import reason
from trainables import data
from trainables.data import DataError

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
# The MD5 is the one published on https://www.cs.toronto.edu/~kriz/cifar.html (torchvision checks it too);
# the SHA-256 is the one Keras 3 checks the download from URL against (keras/src/datasets/cifar10.py).
OFFICIAL_CHECKSUMS = (("md5", "c58f30108f718f92721af3b95e74349a"),
                      ("sha256", "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"))
OFFICIAL_BYTES = 170_498_071  # the official archive's length (its server's Content-Length): 163 MiB
PART = data.ARCHIVE + ".part"
UNPACKING = ".cifar-10-unpacking-"  # the temporary folder's prefix, in DIR so that the rename is atomic
# Bounds from the real archive: 6 batch files of 29.6 MiB (31,035,999 bytes at most), batches.meta
# (158 bytes) and readme.html (88 bytes), 178 MiB in all, 9 members with the folder.
MEMBERS = frozenset((*data.TRAIN_FILES, data.TEST_FILE, "batches.meta", "readme.html"))
REQUIRED = (*data.TRAIN_FILES, data.TEST_FILE)
MAX_MEMBERS = 16
MAX_MEMBER_BYTES = 32 * MIB
MAX_UNPACKED_BYTES = 192 * MIB
MAX_ARCHIVE_BYTES = 192 * MIB


@dataclass(frozen=True)
class Source:
    """Where the archive comes from and the checksums it must have: (algorithm, hex digest) pairs."""

    url: str
    checksums: tuple[tuple[str, str], ...]


def source(url: str | None = None, checksum: str | None = None) -> Source:
    """The options' source, else $SWEEP_CIFAR10_URL and $SWEEP_CIFAR10_CHECKSUM, else the official one."""
    url = url or os.environ.get("SWEEP_CIFAR10_URL") or URL
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise FetchError(f"URL {url!r}: expected an http:// or https:// URL")
    checksum = checksum or os.environ.get("SWEEP_CIFAR10_CHECKSUM")
    return Source(url, (parse_checksum(checksum),) if checksum else OFFICIAL_CHECKSUMS)


def parse_checksum(text: str) -> tuple[str, str]:
    algorithm, _, digest = text.strip().partition(":")
    length = {"md5": 32, "sha256": 64}.get(algorithm.lower())
    if not length or not re.fullmatch(f"[0-9a-fA-F]{{{length}}}", digest):
        raise FetchError(f"checksum {text!r}: expected md5:<32 hex digits> or sha256:<64 hex digits>")
    return algorithm.lower(), digest.lower()


def fetch_cifar10(data_dir: str | Path, src: Source, out: TextIO = sys.stdout) -> None:
    """Make DATA_DIR/cifar-10-batches-py/ from src, or find CIFAR-10 already there; FetchError otherwise."""
    root = Path(data_dir).resolve()
    if data.has_cifar10(str(root)):
        try:
            found = data.load_cifar10(str(root))
        except DataError as e:
            raise FetchError(f"{e} (the data already in {root} fails the loader's check: move it away "
                             "and fetch again)") from None
        print(f"CIFAR-10 is already in {root} ({_images(found)}, checked by the loader): nothing to fetch",
              file=out)
        return
    made = [folder for folder in (root, *root.parents) if not folder.exists()]
    try:
        _fetch(root, src, out)
    except BaseException:
        for folder in made:  # deepest first; a folder holding a partial download to resume stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _fetch(root: Path, src: Source, out: TextIO) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create the data folder {root}: {reason(e)}") from None
    part = root / PART
    with locked(part) as f:
        try:
            whole = f.tell() > 0 and mismatch(part, src.checksums) is None  # downloaded before, not unpacked
            if not whole:
                download(src.url, f, part, out, MAX_ARCHIVE_BYTES, "CIFAR-10's archive")
                bad = mismatch(part, src.checksums)
                if bad:
                    part.unlink()
                    raise FetchError(f"{src.url}: {bad}: the download is deleted (a corrupt transfer or mirror; "
                                     "--checksum names the checksum of another archive)")
            print(f"checksum verified ({', '.join(a for a, _ in src.checksums)}); unpacking", file=out)
            found = _unpack(part, root)
        finally:
            if part.exists() and part.stat().st_size == 0:  # a download that got no byte leaves nothing
                part.unlink()
    part.unlink()
    print(f"CIFAR-10 is in {root / data.FOLDER} ({_images(found)}, checked by the loader)", file=out)


def fetch_for_run(data_dir: str, ask: bool) -> None:
    """`run` needs CIFAR-10 in data_dir and it is missing: fetch it when asked to (--fetch-data) or
    when the user says yes on a terminal; otherwise a FetchError naming the command that fetches it."""
    command = f"python -m sweep data fetch cifar10 --data-dir {shlex.quote(data_dir)}"
    src = source()
    if ask:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise FetchError(f"no CIFAR-10 under {data_dir} (cifar-10-batches-py/ or {data.ARCHIVE}); "
                             f"fetch it with: {command}")
        host = urlsplit(src.url).netloc
        try:
            answer = input(f"No CIFAR-10 under {data_dir}. Download it from {host} "
                           f"({OFFICIAL_BYTES / MIB:.0f} MiB) now? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise FetchError(f"no CIFAR-10 under {data_dir}: nothing fetched; fetch it with: {command}")
    fetch_cifar10(data_dir, src)


def _images(found: data.Cifar10) -> str:
    return f"{len(found.train_y):,} training and {len(found.test_y):,} test images"


# --- unpacking -------------------------------------------------------------------------------------

def _unpack(archive: Path, root: Path) -> data.Cifar10:
    """root/cifar-10-batches-py/ from the archive, all of it or nothing; returns what the loader read."""
    names = _walk(archive, into=None)  # every member is checked before anything is written
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise _refused(archive, f"it has no member {data.FOLDER}/{missing[0]}")
    for stale in root.glob(UNPACKING + "*"):  # left by a fetch that was killed (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=UNPACKING, dir=root))
    except OSError as e:
        raise FetchError(f"cannot unpack in {root}: {reason(e)}") from None
    try:
        (tmp / data.FOLDER).mkdir()
        _walk(archive, into=tmp / data.FOLDER)
        try:
            found = data.load_cifar10(str(tmp))
        except DataError as e:
            raise _refused(archive, f"its files fail the loader's check: {e}") from None
        try:
            os.rename(tmp / data.FOLDER, root / data.FOLDER)
        except OSError as e:
            raise FetchError(f"cannot move the unpacked files to {root / data.FOLDER}: {reason(e)}") from None
        return found
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refused(archive: Path, why: str) -> FetchError:
    archive.unlink(missing_ok=True)  # it can never be unpacked: fetching again starts afresh
    return FetchError(f"{archive}: refused, {why}; nothing was unpacked and the archive is deleted")


def _walk(archive: Path, into: Path | None) -> set[str]:
    """Check every member in order (and with `into`, write each file there); the names of the files."""
    names: set[str] = set()
    total = 0
    try:
        with gzip.open(archive) as gz, tarfile.open(fileobj=_Capped(gz, archive), mode="r|") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise _refused(archive, f"more than {MAX_MEMBERS} members (CIFAR-10 has 9)")
                name = _member_name(member, names, archive)
                if name is None:
                    continue
                total += member.size
                if total > MAX_UNPACKED_BYTES:
                    raise _refused(archive, f"its files hold more than {MAX_UNPACKED_BYTES // MIB} MiB "
                                            "(CIFAR-10's hold 178 MiB)")
                names.add(name)
                if into is not None:
                    _copy(tar.extractfile(member), into / name, member.size)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:  # write errors are FetchErrors already
        raise _refused(archive, f"it is not a readable .tar.gz ({type(e).__name__}: {e})") from None
    return names


def _member_name(member: tarfile.TarInfo, seen: set[str], archive: Path) -> str | None:
    """The file name a member is unpacked as; None for the folder itself; refused in one line otherwise."""
    path = PurePosixPath(member.name)
    parts = [p for p in path.parts if p != "."]
    why = None
    if path.is_absolute():
        why = "an absolute path"
    elif ".." in parts:
        why = "a path with '..'"
    elif member.issym() or member.islnk():
        why = f"a {'symbolic' if member.issym() else 'hard'} link (to {member.linkname!r})"
    elif member.ischr() or member.isblk() or member.isfifo():
        why = "a device or FIFO"
    elif not (member.isreg() or member.isdir()):
        why = "not a regular file"
    elif not parts or parts[0] != data.FOLDER:
        why = f"outside {data.FOLDER}/"
    elif member.isdir():
        if len(parts) == 1:
            return None
        why = "a folder CIFAR-10 does not have"
    elif len(parts) != 2 or parts[1] not in MEMBERS:
        why = "a file CIFAR-10 does not have"
    elif parts[1] in seen:
        why = "a second copy of a file"
    elif member.size > MAX_MEMBER_BYTES:
        why = (f"{member.size / MIB:.0f} MiB, more than any CIFAR-10 file holds "
               f"({MAX_MEMBER_BYTES // MIB} MiB at most)")
    if why:
        raise _refused(archive, f"member {member.name!r} is {why}")
    return parts[1]


def _copy(src: BinaryIO | None, dest: Path, size: int) -> None:
    """A member's data into dest; errors reading the archive propagate, errors writing are FetchErrors."""
    assert src is not None  # a regular file's member always has data
    written = 0
    try:
        f = open(dest, "xb")
    except OSError as e:
        raise FetchError(f"cannot write {dest}: {reason(e)}") from None
    with f:
        while chunk := src.read(CHUNK):
            try:
                f.write(chunk)
                f.flush()  # so that closing has nothing left to fail on
            except OSError as e:
                raise FetchError(f"cannot write {dest}: {reason(e)}") from None
            written += len(chunk)
    if written != size:
        raise FetchError(f"{dest}: {written} bytes unpacked, the archive says {size}")


class _Capped:
    """The decompressed stream, refused past the most a CIFAR-10 tar can hold: a gzip bomb or a huge
    header (tarfile reads long names and pax headers whole) costs bounded time and memory."""

    LIMIT = MAX_UNPACKED_BYTES + MIB  # the files plus their headers

    def __init__(self, stream: BinaryIO, archive: Path) -> None:
        self.stream, self.archive, self.read_bytes = stream, archive, 0

    def read(self, size: int = -1) -> bytes:
        size = self.LIMIT + 1 - self.read_bytes if size < 0 else size
        chunk = self.stream.read(min(size, self.LIMIT + 1 - self.read_bytes))
        self.read_bytes += len(chunk)
        if self.read_bytes > self.LIMIT:
            raise _refused(self.archive, f"it unpacks to more than {self.LIMIT // MIB} MiB")
        return chunk
