"""`python -m sweep data fetch cifar10` and `run`'s offer to fetch, against an HTTP server on 127.0.0.1.

The server is started here (http.server in a thread); it serves a small archive in CIFAR-10's real
format, answers Range requests, and can cut a connection after N bytes, ignore Range, or answer an
error. The expected checksum is passed in, as a user with a mirror would. Nothing reaches the internet.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import os
import pty
import re
import resource
import select
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cifar_files import write_archive, write_cifar10
from conftest import ROOT, SWEEPS, run_cli

from sweep import datasets, store
from sweep.errors import FetchError
from trainables import data

NO_PROXY = {"no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}  # a proxy in the environment must not see these


@dataclass
class Served:
    """What the test server answers, and the Range header of each request it got (None: no Range)."""

    body: bytes = b""
    cut_after: list[int] = field(default_factory=list)  # the next requests: bytes sent before the cut
    status: int | None = None  # answer every request with this error
    ignore_range: bool = False  # answer every request with the whole file (200), as some servers do
    claimed_length: int | None = None  # a Content-Length other than the body's (a wrong URL's huge file)
    ranges: list[str | None] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        served: Served = self.server.served  # type: ignore[attr-defined]
        asked = self.headers.get("Range")
        served.ranges.append(asked)
        if served.status:
            self.send_error(served.status)
            return
        body, start = served.body, 0
        if asked and not served.ignore_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", asked)[1])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(served.claimed_length or len(body) - start))
        self.end_headers()
        payload = body[start:]
        if served.cut_after:  # send part of the body, then close: the client sees the connection drop
            payload = payload[:served.cut_after.pop(0)]
            self.close_connection = True
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.served = Served()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/cifar-10-python.tar.gz", httpd.served  # type: ignore[attr-defined]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def source_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=20, test=30)


@pytest.fixture(scope="module")
def archive(source_data: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return (write_archive(source_data, tmp_path_factory.mktemp("tgz")) / data.ARCHIVE).read_bytes()


def sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def fetch(url: str, body: bytes, data_dir: Path, *more: str) -> subprocess.CompletedProcess:
    return run_cli("data", "fetch", "cifar10", "--data-dir", str(data_dir), "--url", url,
                   "--checksum", sha256(body), *more, timeout=120, env=NO_PROXY)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def assert_same_data(data_dir: Path, source_data: Path) -> None:
    got, want = data.load_cifar10(str(data_dir)), data.load_cifar10(str(source_data))
    np.testing.assert_array_equal(got.train_x, want.train_x)
    np.testing.assert_array_equal(got.train_y, want.train_y)
    np.testing.assert_array_equal(got.test_x, want.test_x)


def test_fetch_downloads_verifies_and_unpacks(server, archive: bytes, source_data: Path, tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    stale = tmp_path / "data" / (datasets.UNPACKING + "killed")  # left by a fetch killed while unpacking
    stale.mkdir(parents=True)
    (stale / "data_batch_1").write_bytes(b"half")
    out = fetch(url, archive, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert served.ranges == [None]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [data.FOLDER]  # no .part, no temporary folder
    assert_same_data(tmp_path / "data", source_data)
    assert "checksum verified (sha256)" in out.stdout and "100 training and 30 test images" in out.stdout
    assert len(out.stdout.splitlines()) <= 15 and "\r" not in out.stdout  # plain lines off a terminal, bounded

    again = fetch(url, archive, tmp_path / "data")  # already there: verified by the loader, no request
    assert again.returncode == 0 and "already in" in again.stdout, again.stdout + again.stderr
    assert served.ranges == [None]


def test_fetch_with_an_md5_checksum_into_sweep_data_dir(server, archive: bytes, source_data: Path, tmp_path: Path) -> None:
    """The two documented forms the first test does not take: --checksum md5:HEX, and no --data-dir (the
    folder comes from $SWEEP_DATA_DIR)."""
    url, served = server
    served.body = archive
    target = tmp_path / "from-env"
    out = run_cli("data", "fetch", "cifar10", "--url", url, "--checksum", "md5:" + hashlib.md5(archive).hexdigest(),
                  timeout=120, env={**NO_PROXY, "SWEEP_DATA_DIR": str(target)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "checksum verified (md5)" in out.stdout
    assert sorted(p.name for p in target.iterdir()) == [data.FOLDER]
    assert_same_data(target, source_data)


def test_data_already_there_needs_no_server(source_data: Path, tmp_path: Path) -> None:
    archive_only = write_archive(source_data, tmp_path / "archive")  # the loader reads the .tar.gz too
    for folder in (source_data, archive_only):
        out = run_cli("data", "fetch", "cifar10", "--data-dir", str(folder), "--url", "http://127.0.0.1:1/x",
                      timeout=60, env=NO_PROXY)
        assert out.returncode == 0 and "nothing to fetch" in out.stdout, out.stdout + out.stderr


def test_broken_data_already_there_is_named_not_replaced(source_data: Path, tmp_path: Path) -> None:
    shutil.copytree(source_data, tmp_path / "data")
    (tmp_path / "data" / data.FOLDER / "test_batch").write_bytes(b"garbage")
    line = one_error_line(run_cli("data", "fetch", "cifar10", "--data-dir", str(tmp_path / "data"),
                                  "--url", "http://127.0.0.1:1/x", timeout=60, env=NO_PROXY))
    assert "test_batch" in line and "move it away and fetch again" in line
    assert (tmp_path / "data" / data.FOLDER / "test_batch").read_bytes() == b"garbage"


def test_whole_download_not_yet_unpacked_needs_no_request(server, archive: bytes, source_data: Path,
                                                          tmp_path: Path) -> None:
    url, served = server
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / datasets.PART).write_bytes(archive)  # a fetch killed after its download
    out = fetch(url, archive, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert served.ranges == []
    assert_same_data(tmp_path / "data", source_data)


def test_a_second_fetch_into_the_same_folder_is_refused(server, archive: bytes, tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data" / datasets.PART, "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a fetch that is downloading holds it
        line = one_error_line(fetch(url, archive, tmp_path / "data"))
    assert "another fetch is writing" in line and served.ranges == []


def test_more_than_cifar10s_archive_is_refused_before_download(server, archive: bytes, tmp_path: Path) -> None:
    url, served = server
    served.body, served.claimed_length = archive, 5 << 30  # a wrong URL: a 5 GiB file
    line = one_error_line(fetch(url, archive, tmp_path / "data"))
    assert "offers 5120 MiB, more than CIFAR-10's archive" in line
    assert not (tmp_path / "data").exists()


def test_cut_connection_resumes_with_a_range_request(server, archive: bytes, source_data: Path,
                                                     tmp_path: Path) -> None:
    url, served = server
    served.body, served.cut_after = archive, [100_000]
    out = fetch(url, archive, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert served.ranges == [None, "bytes=100000-"]
    assert "connection lost at" in out.stdout and "resuming at" in out.stdout
    assert_same_data(tmp_path / "data", source_data)


def test_interrupted_download_resumes_when_run_again(server, archive: bytes, source_data: Path,
                                                     tmp_path: Path) -> None:
    url, served = server
    served.body, served.cut_after = archive, [50_000, 0]  # the automatic resume gets nothing: give up
    line = one_error_line(fetch(url, archive, tmp_path / "data"))
    assert "interrupted at" in line and "run the same command again to resume" in line
    part = tmp_path / "data" / datasets.PART
    assert part.stat().st_size == 50_000 and not (tmp_path / "data" / data.FOLDER).exists()

    out = fetch(url, archive, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert served.ranges == [None, "bytes=50000-", "bytes=50000-"]
    assert not part.exists()
    assert_same_data(tmp_path / "data", source_data)


def test_server_ignoring_range_starts_over(server, archive: bytes, source_data: Path, tmp_path: Path) -> None:
    url, served = server
    served.body, served.cut_after, served.ignore_range = archive, [70_000], True
    out = fetch(url, archive, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert served.ranges == [None, "bytes=70000-"] and "starting over" in out.stdout
    assert_same_data(tmp_path / "data", source_data)


def test_partial_file_that_is_not_a_prefix_starts_over(server, archive: bytes, source_data: Path,
                                                       tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / datasets.PART).write_bytes(b"x" * (len(archive) + 10))  # longer than the file: 416
    out = fetch(url, archive, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert served.ranges == [f"bytes={len(archive) + 10}-", None]
    assert_same_data(tmp_path / "data", source_data)


def test_checksum_mismatch_deletes_the_download(server, archive: bytes, tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    out = run_cli("data", "fetch", "cifar10", "--data-dir", str(tmp_path / "data"), "--url", url,
                  "--checksum", "md5:" + "0" * 32, timeout=120, env=NO_PROXY)
    line = one_error_line(out)
    assert f"md5 {hashlib.md5(archive).hexdigest()}, expected {'0' * 32}" in line and "deleted" in line
    assert not (tmp_path / "data").exists()  # the folder it made is gone again: nothing left behind


def test_official_checksums_are_checked_by_default(server, archive: bytes, tmp_path: Path) -> None:
    url, served = server
    served.body = archive  # not the official archive: its MD5 differs
    line = one_error_line(run_cli("data", "fetch", "cifar10", "--data-dir", str(tmp_path / "data"),
                                  "--url", url, timeout=120, env=NO_PROXY))
    assert "expected c58f30108f718f92721af3b95e74349a" in line


@pytest.mark.parametrize("status", [404, 500])
def test_http_error_is_one_line(server, archive: bytes, tmp_path: Path, status: int) -> None:
    url, served = server
    served.status = status
    line = one_error_line(fetch(url, archive, tmp_path / "data"))
    assert f"HTTP {status}" in line and url in line
    assert not (tmp_path / "data").exists()


def test_unreachable_server_and_unwritable_folder_are_one_line(archive: bytes, tmp_path: Path) -> None:
    line = one_error_line(fetch("http://127.0.0.1:1/cifar-10-python.tar.gz", archive, tmp_path / "data"))
    assert "cannot download" in line and "refused" in line.lower()
    (tmp_path / "a_file").write_text("")
    for folder in (tmp_path / "a_file" / "data", Path("/proc/sweep-data")):
        line = one_error_line(fetch("http://127.0.0.1:1/x", archive, folder))
        assert f"cannot create the data folder {folder}" in line
    for bad in (["--checksum", "md5:abc"], ["--url", "ftp://example.org/x.tar.gz"]):
        out = run_cli("data", "fetch", "cifar10", "--data-dir", str(tmp_path / "d"), *bad, timeout=60)
        assert "expected" in one_error_line(out)


def test_a_resume_is_offered_only_where_a_partial_download_exists(server, archive: bytes, tmp_path: Path) -> None:
    """No network and nothing downloaded: nothing to resume, and the line says so, not 'run the same command
    again to resume' (issue 40). With a partial download in the folder, it is kept and the line says how to resume."""
    nowhere = "http://127.0.0.1:1/cifar-10-python.tar.gz"  # a port nobody listens on: the connection is refused
    line = one_error_line(fetch(nowhere, archive, tmp_path / "data"))
    assert line.endswith("; nothing was downloaded") and "resume" not in line, line
    assert not (tmp_path / "data").exists()
    url, served = server
    served.body, served.cut_after = archive, [0]  # the server hangs up before the first byte
    line = one_error_line(fetch(url, archive, tmp_path / "data"))
    assert "download interrupted (" in line and line.endswith("; nothing was downloaded") and "resume" not in line, line
    assert not (tmp_path / "data").exists()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / datasets.PART).write_bytes(archive[:3 << 17])
    line = one_error_line(fetch(nowhere, archive, tmp_path / "data"))
    assert line.endswith("; the 0.4 MiB downloaded so far are kept: run the same command again to resume"), line
    assert (tmp_path / "data" / datasets.PART).read_bytes() == archive[:3 << 17]


def test_full_disk_is_one_line_and_leaves_nothing(server, archive: bytes, tmp_path: Path) -> None:
    """A file-size limit makes the write fail as a full disk does (EFBIG instead of ENOSPC)."""
    url, served = server
    served.body = archive
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # noqa: E731
    out = subprocess.run([sys.executable, "-m", "sweep", "data", "fetch", "cifar10", "--data-dir",
                          str(tmp_path / "data"), "--url", url, "--checksum", sha256(archive)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=limit,
                         env={**os.environ, **NO_PROXY})
    line = one_error_line(out)
    assert "cannot write" in line and "File too large" in line
    assert not (tmp_path / "data").exists()


# --- hostile archives ------------------------------------------------------------------------------

def regular(name: str, content: bytes | int) -> tuple[tarfile.TarInfo, bytes | int]:
    """A file member; an int as content is that many zero bytes."""
    return tarfile.TarInfo(name), content


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.devmajor, info.devminor = kind, linkname, 1, 3
    return info, b""


class Zeros(io.RawIOBase):
    """A stream of n zero bytes, so that large members need no memory."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n

    def readable(self) -> bool:
        return True


def pack(good: Path, extra: list[tuple[tarfile.TarInfo, bytes | int]]) -> bytes:
    """The good files first (a careless extractor would have written them), then the extra members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(good / data.FOLDER, arcname=data.FOLDER)
        for info, content in extra:
            if isinstance(content, int):
                info.size = content
                tar.addfile(info, io.BufferedReader(Zeros(content)))
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content) if info.isreg() else None)
    return buf.getvalue()


F = data.FOLDER
HOSTILE: dict[str, tuple[Callable[[Path], list], str]] = {
    "absolute path": (lambda t: [regular(str(t / "escaped"), b"x")], "an absolute path"),
    "dot-dot": (lambda t: [regular(f"{F}/../../escaped", b"x")], "a path with '..'"),
    "symlink": (lambda t: [special(f"{F}/readme.html", tarfile.SYMTYPE, str(t / "escaped"))], "a symbolic link"),
    "hard link": (lambda t: [special(f"{F}/readme.html", tarfile.LNKTYPE, "/etc/passwd")], "a hard link"),
    "device": (lambda t: [special(f"{F}/readme.html", tarfile.CHRTYPE)], "a device or FIFO"),
    "fifo": (lambda t: [special(f"{F}/readme.html", tarfile.FIFOTYPE)], "a device or FIFO"),
    "outside the folder": (lambda t: [regular("escaped", b"x")], "outside cifar-10-batches-py/"),
    "unknown file": (lambda t: [regular(f"{F}/run_me.py", b"x")], "a file CIFAR-10 does not have"),
    "second copy": (lambda t: [regular(f"{F}/test_batch", b"x")], "a second copy of a file"),
    "member too large": (lambda t: [regular(f"{F}/readme.html", 33 << 20)], "more than any CIFAR-10 file"),
    "too many members": (lambda t: [special(F, tarfile.DIRTYPE)] * 10, "more than 16 members"),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_archive_is_refused_before_anything_is_written(kind: str, server, source_data: Path,
                                                               tmp_path: Path) -> None:
    url, served = server
    members, why = HOSTILE[kind]
    served.body = pack(source_data, members(tmp_path))
    root = tmp_path / "data"
    with pytest.raises(FetchError) as refused:
        datasets.fetch_cifar10(root, datasets.Source(url, (("sha256", sha256(served.body)[7:]),)), io.StringIO())
    message = str(refused.value)
    assert "\n" not in message and why in message and "refused" in message, message
    assert list(tmp_path.iterdir()) == []  # nothing unpacked, in DIR or outside it; the archive deleted


def test_files_beyond_cifar10s_total_are_refused(server, source_data: Path, tmp_path: Path) -> None:
    """Each file within the bound, all of them beyond it: refused at the header that crosses it."""
    url, served = server
    big = tmp_path / "big"
    (big / F).mkdir(parents=True)  # no good files here: seven 30 MiB members with CIFAR-10's names
    served.body = pack(big, [regular(f"{F}/{name}", 30 << 20) for name in (*data.TRAIN_FILES, data.TEST_FILE,
                                                                            "batches.meta")])
    src = datasets.Source(url, (("sha256", sha256(served.body)[7:]),))
    with pytest.raises(FetchError, match="hold more than 192 MiB"):
        datasets.fetch_cifar10(tmp_path / "data", src, io.StringIO())
    assert not (tmp_path / "data").exists()


def test_decompressed_stream_is_capped(server, source_data: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever tarfile reads (long names and pax headers, read whole) counts against one cap."""
    url, served = server
    monkeypatch.setattr(datasets._Capped, "LIMIT", 1 << 20)
    served.body = pack(source_data, [regular(f"{F}/readme.html", 2 << 20)])
    src = datasets.Source(url, (("sha256", sha256(served.body)[7:]),))
    with pytest.raises(FetchError, match="unpacks to more than 1 MiB"):
        datasets.fetch_cifar10(tmp_path / "data", src, io.StringIO())


def test_hostile_archive_through_the_cli(server, source_data: Path, tmp_path: Path) -> None:
    url, served = server
    served.body = pack(source_data, [regular(f"{F}/../../escaped", b"x")])
    line = one_error_line(fetch(url, served.body, tmp_path / "data"))
    assert "member 'cifar-10-batches-py/../../escaped' is a path with '..'" in line
    assert not (tmp_path / "data").exists() and not (tmp_path / "escaped").exists()


def test_archive_that_is_not_gzip_is_refused(server, tmp_path: Path) -> None:
    url, served = server
    served.body = b"this is not a tar.gz at all" * 100
    line = one_error_line(fetch(url, served.body, tmp_path / "data"))
    assert "not a readable .tar.gz" in line
    assert not (tmp_path / "data").exists()


# --- run: asks on a terminal, names the command elsewhere, fetches with --fetch-data -------------------

def run_env(url: str, body: bytes) -> dict[str, str]:
    return {**NO_PROXY, "SWEEP_CIFAR10_URL": url, "SWEEP_CIFAR10_CHECKSUM": sha256(body)}


# The run's last check before Ray starts (writing --results) fails: it stops with one line right after the data step.
UNREACHABLE = ("--results", "/proc/no/results")


def test_run_without_data_names_the_fetch_command(server, archive: bytes, tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    out = run_cli(str(SWEEPS / "tiny_mxnet.yaml"), "--scale", "full", "--data-dir", str(tmp_path / "data"),
                  "--results", str(tmp_path / "results"), *UNREACHABLE, timeout=120, env=run_env(url, archive))
    line = one_error_line(out)
    assert f"fetch it with: python -m sweep data fetch cifar10 --data-dir {tmp_path / 'data'}" in line
    assert served.ranges == [] and not (tmp_path / "data").exists()  # nothing fetched silently


def test_run_fetch_data_fetches_without_asking(server, archive: bytes, source_data: Path, tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    out = run_cli(str(SWEEPS / "tiny_mxnet.yaml"), "--scale", "full", "--data-dir", str(tmp_path / "data"),
                  "--fetch-data", "--results", str(tmp_path / "results"), *UNREACHABLE, timeout=120,
                  env=run_env(url, archive))
    assert "cannot write results there" in one_error_line(out)  # the data step passed; the run went on
    assert served.ranges == [None]
    assert_same_data(tmp_path / "data", source_data)


def on_terminal(args: list[str], answer: str, env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal, answer its question, and return its exit code and output."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdin=child, stdout=child,
                            stderr=child, env={**os.environ, "TERM": "xterm", "SWEEP_PROGRESS": "auto", **env},
                            close_fds=True)
    os.close(child)
    output, answered, deadline = b"", False, time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        if not answered and b"[y/N]" in output:
            os.write(main, answer.encode() + b"\n")
            answered = True
    os.close(main)
    return proc.wait(timeout=30), output.decode(errors="replace")


@pytest.mark.parametrize("answer", ["n", "y"])
def test_run_on_a_terminal_asks_before_fetching(answer: str, server, archive: bytes, source_data: Path,
                                                tmp_path: Path) -> None:
    url, served = server
    served.body = archive
    code, output = on_terminal([str(SWEEPS / "tiny_mxnet.yaml"), "--scale", "full", "--data-dir",
                                str(tmp_path / "data"), "--results", str(tmp_path / "results"), *UNREACHABLE],
                               answer, run_env(url, archive))
    assert f"No CIFAR-10 under {tmp_path / 'data'}. Download it from 127.0.0.1" in output, output
    assert code == 2 and "Traceback" not in output, output
    if answer == "n":
        assert "nothing fetched; fetch it with: python -m sweep data fetch cifar10" in output
        assert served.ranges == [] and not (tmp_path / "data").exists()
    else:
        assert served.ranges == [None] and "#] 100% (" in output  # the bar, drawn on the terminal
        assert_same_data(tmp_path / "data", source_data)
        assert "cannot write results there" in output  # and the run went on


@pytest.mark.slow
def test_run_trains_on_fetched_data(server, archive: bytes, tmp_path: Path) -> None:
    """The first-run path: no data, --fetch-data, and the sweep trains on what was fetched."""
    url, served = server
    served.body = archive
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "one_trial.yaml"), "--fetch-data", "--data-dir", str(tmp_path / "data"),
                  "--results", str(results), timeout=600, env=run_env(url, archive))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "CIFAR-10 is in" in out.stdout and served.ranges == [None]
    epochs = pd.read_parquet(store.run_dirs(results, "one_trial")[-1] / "epochs")
    assert set(epochs.data_kind) == {"real"} and epochs.val_acc.notna().all()
