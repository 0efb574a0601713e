"""Where results live: a local folder, or a pyarrow filesystem URI such as s3://bucket/prefix.

`at(text)` gives a pathlib.Path for a folder and a RemotePath for a URI. RemotePath offers the part of
Path's interface the store uses, over pyarrow.fs, so the store, Tune's storage and the reports are
written once for both. Its str() is the URI again, query included (s3://b/p?endpoint_override=...), so
a location handed to a trial process as text opens the same filesystem there.
"""
from __future__ import annotations

import errno
import fnmatch
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs


def is_uri(text: str) -> bool:
    return "://" in text


def at(text: str) -> Path | RemotePath:
    """The location a --results value names; a file:// URI is a local folder."""
    if not is_uri(text):
        return Path(text).resolve()
    parts = urlsplit(text)
    if parts.scheme == "file":
        return Path(parts.path).resolve()
    try:
        fs, path = pafs.FileSystem.from_uri(text)
    except Exception as e:  # pyarrow raises ArrowInvalid, ValueError or OSError by scheme
        raise ValueError(f"{text}: not a filesystem URI pyarrow can open ({str(e).splitlines()[0]})") from None
    if not path.strip("/"):
        raise ValueError(f"{text}: names no bucket or folder")
    prefix = f"{parts.scheme}://"
    return RemotePath(fs, path.rstrip("/"), prefix, f"?{parts.query}" if parts.query else "")


class RemotePath:
    """A file or folder on a pyarrow filesystem, with pathlib's names for what the store does."""

    def __init__(self, fs: pafs.FileSystem, path: str, prefix: str, query: str = "") -> None:
        self.fs, self.path, self._prefix, self._query = fs, path, prefix, query

    def __truediv__(self, name: str) -> RemotePath:
        return RemotePath(self.fs, f"{self.path}/{name}", self._prefix, self._query)

    def __str__(self) -> str:
        return f"{self._prefix}{self.path}{self._query}"

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    def __lt__(self, other: RemotePath) -> bool:
        return self.path < other.path

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else self.name

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self.fs, self.path.rsplit("/", 1)[0], self._prefix, self._query)

    def _type(self) -> pafs.FileType:
        return self.fs.get_file_info(self.path).type

    def exists(self) -> bool:
        return self._type() != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self._type() == pafs.FileType.File

    def is_dir(self) -> bool:
        return self._type() == pafs.FileType.Directory

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        if not exist_ok and self.exists():
            raise FileExistsError(str(self))
        self.fs.create_dir(self.path, recursive=True)

    def iterdir(self) -> list[RemotePath]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return sorted(self / info.base_name for info in infos)

    def glob(self, pattern: str) -> list[RemotePath]:
        """pathlib's glob for patterns of plain names and wildcards, one level per '/'."""
        found = [self]
        for part in pattern.split("/"):
            found = [child for folder in found if folder.is_dir() for child in folder.iterdir()
                     if fnmatch.fnmatchcase(child.name, part)]
        return found

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, payload: bytes) -> None:
        # An object store's put is atomic: a reader sees the whole object or none (S3, GCS, Azure).
        with self.fs.open_output_stream(self.path) as f:
            f.write(payload)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def touch(self) -> None:
        self.write_bytes(b"")

    def unlink(self) -> None:
        self.fs.delete_file(self.path)

    def download(self, local: Path) -> None:
        """Copy this folder, recursively, to a local one."""
        local.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(self.path, str(local), source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())


Location = Path | RemotePath


def check(location: Location, write: bool) -> None:
    """Reach the location now (for write: make it and write a file there): OSError with the reason if not.

    It leaves the disk as it found it: a command refused later has written nothing.
    """
    if location.exists() and not location.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder")
    if not write:
        return
    # An object store needs no folders for a key; a local folder and its missing parents are made, then removed.
    made = [p for p in (location, *location.parents) if not p.exists()] if isinstance(location, Path) else []
    try:
        if made:
            location.mkdir(parents=True)
        probe = location / f".write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    finally:
        for folder in made:  # deepest first
            if folder.exists():
                folder.rmdir()


def remove_tree(location: Location) -> None:
    """Delete a folder and everything in it (`python -m sweep rm`); a symbolic link is refused (OSError), not followed."""
    if isinstance(location, RemotePath):
        location.fs.delete_dir(location.path)
    else:
        shutil.rmtree(location)


def reason(error: OSError) -> str:
    """An OSError in a line: errno's words for a local one, the first line of pyarrow's message otherwise."""
    return error.strerror or str(error).splitlines()[0]


def tune_storage(location: Location) -> dict[str, object]:
    """Ray Tune's RunConfig arguments for storage at this location."""
    if isinstance(location, RemotePath):
        return {"storage_path": location.path, "storage_filesystem": location.fs}
    return {"storage_path": str(location)}
