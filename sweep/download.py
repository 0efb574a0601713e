"""One file over HTTP(S), resumable, bounded and checked: what `data fetch` downloads with (sweep/datasets.py).

A cut connection resumes with an HTTP Range request (at once while the transfer progresses, else when
the command runs again); a server that ignores Range sends the whole file, and the download starts
over. At most `limit` bytes are taken, so a wrong URL cannot fill the disk. On a terminal a bar is
redrawn in place; elsewhere a line at each tenth, so the output stays bounded.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from sweep.errors import FetchError
from sweep.location import reason
from sweep.terminal import live_wanted

MIB = 1 << 20
CHUNK = MIB
TIMEOUT_S = 60  # a stalled connection counts as cut after this long without a byte
RESUMES = 5  # cut connections resumed at once in one command, each after some progress


@contextlib.contextmanager
def locked(part: Path) -> Iterator[BinaryIO]:
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


def mismatch(path: Path, checksums: tuple[tuple[str, str], ...]) -> str | None:
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


def download(url: str, f: BinaryIO, part: Path, out: TextIO, limit: int, what: str) -> None:
    """The rest of the file at url appended to f (the partial download `part`, opened by `locked`).
    More than `limit` bytes is refused: `what` names the file such a limit is for, in the message."""
    progress = _Progress(out, live_wanted(out))
    resumed = 0
    while True:
        try:
            _transfer(url, f, part, progress, limit, what)
            return
        except _Interrupted as e:
            if not e.progressed or resumed == RESUMES:
                if f.tell():  # a partial file to resume from (an empty one is deleted: sweep/datasets.py)
                    raise FetchError(f"{url}: download interrupted at {f.tell() / MIB:.1f} MiB ({e}); "
                                     "run the same command again to resume") from None
                raise FetchError(f"{url}: download interrupted ({e}); nothing was downloaded") from None
            resumed += 1
            progress.note(f"connection lost at {f.tell() / MIB:.1f} MiB ({e}): resuming")


def _transfer(url: str, f: BinaryIO, part: Path, progress: _Progress, limit: int, what: str) -> None:
    """One request: the rest of the file from f's end (a Range request), or all of it."""
    have = f.tell()
    headers = {"User-Agent": "sweep-data-fetch", **({"Range": f"bytes={have}-"} if have else {})}
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the partial file is as long as the file or longer: it is not a prefix
            _restart(f)
            return _transfer(url, f, part, progress, limit, what)
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        why = e.reason if isinstance(e, urllib.error.URLError) else e
        # Resuming is promised only where there is something to resume from: no network, no partial file.
        left = (f"the {have / MIB:.1f} MiB downloaded so far are kept: run the same command again to resume" if have
                else "nothing was downloaded")
        raise FetchError(f"{url}: cannot download ({why}); {left}") from None
    with response:
        start, total = _body_range(response, url)
        if start != have:
            if start != 0:
                raise FetchError(f"{url}: the server sent bytes from {start}, asked for {have}")
            if have:
                progress.note("the server does not resume downloads: starting over")
            _restart(f)
            have = 0
        if total is not None and total > limit:
            raise FetchError(f"{url}: the server offers {total / MIB:.0f} MiB, more than {what} can be "
                             f"({limit / MIB:.0f} MiB): a wrong URL?")
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
                if have + len(chunk) > limit:
                    raise FetchError(f"{url}: more than {limit / MIB:.0f} MiB, more than {what} can be: a wrong URL?")
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


