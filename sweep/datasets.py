"""`python -m sweep data fetch cifar10`: CIFAR-10 downloaded, verified and unpacked where the loader reads it.

- Download: into DIR/cifar-10-python.tar.gz.part, which the loader never reads. A cut connection resumes
  with an HTTP Range request (at once while the transfer progresses, else when the command runs again);
  a server that ignores Range sends the whole file, and the download starts over. At most
  MAX_ARCHIVE_BYTES are taken, so a wrong URL cannot fill the disk.
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

import contextlib
import fcntl
import gzip
import hashlib
import http.client
import os
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, TextIO
from urllib.parse import urlsplit

from sweep.errors import UserError
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
MIB = 1 << 20
# Bounds from the real archive: 6 batch files of 29.6 MiB (31,035,999 bytes at most), batches.meta
# (158 bytes) and readme.html (88 bytes), 178 MiB in all, 9 members with the folder.
MEMBERS = frozenset((*data.TRAIN_FILES, data.TEST_FILE, "batches.meta", "readme.html"))
REQUIRED = (*data.TRAIN_FILES, data.TEST_FILE)
MAX_MEMBERS = 16
MAX_MEMBER_BYTES = 32 * MIB
MAX_UNPACKED_BYTES = 192 * MIB
MAX_ARCHIVE_BYTES = 192 * MIB
CHUNK = MIB
TIMEOUT_S = 60  # a stalled connection counts as cut after this long without a byte
RESUMES = 5  # cut connections resumed at once in one command, each after some progress


class FetchError(UserError):
    """A download, check or unpack that failed; the message is the one line the user sees."""


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
    with _locked(part) as f:
        try:
            whole = f.tell() > 0 and _mismatch(part, src.checksums) is None  # downloaded before, not unpacked
            if not whole:
                _download(src.url, f, part, out)
                bad = _mismatch(part, src.checksums)
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


@contextlib.contextmanager
def _locked(part: Path) -> Iterator[BinaryIO]:
    """The partial download, opened for appending and locked: two fetches into one folder never mix."""
    try:
        f = open(part, "ab")
    except OSError as e:
        raise FetchError(f"cannot write in the data folder {part.parent}: {reason(e)}") from None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FetchError(f"another fetch is writing {part}: let it finish") from None
        f.seek(0, os.SEEK_END)
        yield f


def _mismatch(path: Path, checksums: tuple[tuple[str, str], ...]) -> str | None:
    """None if the file has every checksum, else a line saying which one differs."""
    hashers = {algorithm: hashlib.new(algorithm) for algorithm, _ in checksums}
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            for h in hashers.values():
                h.update(chunk)
    for algorithm, expected in checksums:
        got = hashers[algorithm].hexdigest()
        if got != expected:
            return f"{algorithm} {got}, expected {expected}"
    return None


# --- download --------------------------------------------------------------------------------------

class _Interrupted(Exception):
    """The connection ended before the whole body came; `progressed`: some bytes came first."""

    def __init__(self, progressed: bool, why: str) -> None:
        super().__init__(why)
        self.progressed = progressed


def _download(url: str, f: BinaryIO, part: Path, out: TextIO) -> None:
    progress = _Progress(out, _live(out))
    resumed = 0
    while True:
        try:
            _transfer(url, f, part, progress)
            return
        except _Interrupted as e:
            if not e.progressed or resumed == RESUMES:
                raise FetchError(f"{url}: download interrupted at {f.tell() / MIB:.1f} MiB ({e}); "
                                 "run the same command again to resume") from None
            resumed += 1
            progress.note(f"connection lost at {f.tell() / MIB:.1f} MiB ({e}): resuming")


def _transfer(url: str, f: BinaryIO, part: Path, progress: _Progress) -> None:
    """One request: the rest of the file from f's end (a Range request), or all of it."""
    have = f.tell()
    headers = {"User-Agent": "sweep-data-fetch", **({"Range": f"bytes={have}-"} if have else {})}
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the partial file is as long as the file or longer: it is not a prefix
            _restart(f)
            return _transfer(url, f, part, progress)
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        why = e.reason if isinstance(e, urllib.error.URLError) else e
        raise FetchError(f"{url}: cannot download ({why})") from None
    with response:
        start, total = _body_range(response, url)
        if start != have:
            if start != 0:
                raise FetchError(f"{url}: the server sent bytes from {start}, asked for {have}")
            if have:
                progress.note("the server does not resume downloads: starting over")
            _restart(f)
            have = 0
        if total is not None and total > MAX_ARCHIVE_BYTES:
            raise FetchError(f"{url}: the server offers {total / MIB:.0f} MiB, more than CIFAR-10's archive "
                             f"({OFFICIAL_BYTES / MIB:.0f} MiB): a wrong URL?")
        progress.begin(url, have, total)
        received = 0
        try:
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (http.client.HTTPException, OSError) as e:
                    raise _Interrupted(received > 0, str(e) or type(e).__name__) from None
                if not chunk:
                    break
                if have + len(chunk) > MAX_ARCHIVE_BYTES:
                    raise FetchError(f"{url}: more than {MAX_ARCHIVE_BYTES / MIB:.0f} MiB, more than "
                                     "CIFAR-10's archive: a wrong URL?")
                _append(f, part, chunk)
                have += len(chunk)
                received += len(chunk)
                progress.update(have)
        finally:
            progress.end()  # the bar's line ends before whatever is said next
        if total is not None and have < total:
            raise _Interrupted(received > 0, f"the server closed the connection at {have:,} of {total:,} bytes")


def _restart(f: BinaryIO) -> None:
    f.seek(0)
    f.truncate()


def _body_range(response: http.client.HTTPResponse, url: str) -> tuple[int, int | None]:
    """Where the body starts in the file and the file's length (None if the server does not say)."""
    if response.status == 206:
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", response.headers.get("Content-Range", "").strip())
        if not match:
            raise FetchError(f"{url}: a partial answer without a usable Content-Range")
        return int(match[1]), None if match[3] == "*" else int(match[3])
    length = response.headers.get("Content-Length")
    return 0, int(length) if length and length.isdigit() else None


def _append(f: BinaryIO, part: Path, chunk: bytes) -> None:
    try:
        f.write(chunk)
        f.flush()
    except OSError as e:  # a full disk, a quota: the partial file is removed, not left to fill it
        part.unlink(missing_ok=True)
        raise FetchError(f"cannot write {part}: {reason(e)} (the partial download is deleted)") from None


def _live(out: TextIO) -> bool:
    """A bar on a terminal, lines elsewhere; SWEEP_PROGRESS=plain|live forces either, as for a run."""
    mode = os.environ.get("SWEEP_PROGRESS", "auto")
    return mode == "live" if mode in ("plain", "live") else out.isatty() and os.environ.get("TERM") != "dumb"


class _Progress:
    """A bar redrawn in place on a terminal; elsewhere a line at each tenth, so output stays bounded."""

    REDRAW_S = 0.2
    UNKNOWN_STEP = 16 * MIB  # without a length: a line per this many bytes (the download is bounded too)

    def __init__(self, out: TextIO, live: bool) -> None:
        self.out, self.live = out, live
        self.total: int | None = None
        self.step, self.drawn_at, self.started, self.first = -1, 0.0, 0.0, 0

    def begin(self, url: str, have: int, total: int | None) -> None:
        self.total, self.started, self.first = total, time.monotonic(), have
        self.step = self._step(have)
        size = f"{total / MIB:.1f} MiB" if total is not None else "length unknown"
        resume = f", resuming at {have / MIB:.1f} MiB" if have else ""
        print(f"downloading {url} ({size}{resume})", file=self.out, flush=True)

    def _step(self, have: int) -> int:
        return have * 10 // self.total if self.total else have // self.UNKNOWN_STEP

    def update(self, have: int) -> None:
        now = time.monotonic()
        if self.live:
            if now - self.drawn_at >= self.REDRAW_S or have == self.total:
                self.drawn_at = now
                self.out.write("\r" + self._bar(have, now))
                self.out.flush()
        elif self._step(have) > self.step:
            self.step = self._step(have)
            print(f"  {self._done(have)}", file=self.out, flush=True)

    def _done(self, have: int) -> str:
        if not self.total:
            return f"{have / MIB:.1f} MiB"
        return f"{100 * have // self.total:3d}% ({have / MIB:.1f} of {self.total / MIB:.1f} MiB)"

    def _bar(self, have: int, now: float) -> str:
        rate = (have - self.first) / max(now - self.started, 1e-6)
        speed = f"{rate / MIB:.1f} MiB/s"
        if not self.total:
            return f"{self._done(have)}  {speed} "
        width = max(10, shutil.get_terminal_size().columns - 55)
        filled = width * have // self.total
        eta = (self.total - have) / rate if rate > 0 else 0
        return f"[{'#' * filled}{'.' * (width - filled)}] {self._done(have)}  {speed}  ETA {eta:.0f} s "

    def end(self) -> None:
        if self.live:
            self.out.write("\n")
            self.out.flush()

    def note(self, line: str) -> None:
        print(line, file=self.out, flush=True)


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
