"""Where the corpora live, how to get them, and how to know they are the right bytes: the
registry :data:`CORPORA` (files, sha256, download addresses, sizes, licences; declared in
:mod:`drillbook.data.corpus_registry`), the one location rule every caller uses
(:func:`data_root`), downloads verified before they are kept (:func:`download`), and
verification of what is on disk (:func:`verify`, :func:`check_sha256`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import DataError, MissingFileError
from .corpus_registry import CORPORA, SPLITS, CorpusSpec

__all__ = [
    "CORPORA",
    "DATA_ENV",
    "SPLITS",
    "ChecksumError",
    "CorpusSpec",
    "DownloadError",
    "FileCheck",
    "check_sha256",
    "corpus_file",
    "corpus_spec",
    "data_root",
    "data_root_source",
    "download",
    "sha256_file",
    "verify",
]

#: Environment variable that names the data root (see :func:`data_root`).
DATA_ENV = "DRILLBOOK_DATA"

#: Seconds the default opener waits for the server before giving up.
DOWNLOAD_TIMEOUT = 60.0

_CHUNK = 1 << 20  # bytes read, hashed and written at a time


# ---------------------------------------------------------------------------- registry
def corpus_spec(name: str) -> CorpusSpec:
    """The registry entry of ``name``; :class:`DataError` listing valid names if unknown."""
    try:
        return CORPORA[name]
    except (KeyError, TypeError):
        raise DataError(
            f"unknown corpus {name!r}; valid names: {', '.join(sorted(CORPORA))}"
        ) from None


# ------------------------------------------------------------------------ location
def _root_and_source(root: str | os.PathLike | None) -> tuple[Path, str]:
    """The data root and, in words, which rule chose it (for error messages)."""
    if root is not None:
        return Path(root).expanduser(), "the root argument"
    env = os.environ.get(DATA_ENV, "")
    if env:
        return Path(env).expanduser(), f"${DATA_ENV}"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative paths
        return Path(xdg) / "drillbook", "the default cache folder ($XDG_CACHE_HOME/drillbook)"
    return Path.home() / ".cache" / "drillbook", "the default cache folder (~/.cache/drillbook)"


def _usable_root(root: str | os.PathLike | None) -> tuple[Path, str]:
    """:func:`_root_and_source`, refusing a data root that exists and is not a folder
    (a :class:`DataError` naming where it was taken from)."""
    base, source = _root_and_source(root)
    if base.exists() and not base.is_dir():
        raise DataError(f"the data root {base} (taken from {source}) is a file, not a folder; "
                        f"set ${DATA_ENV} to a folder (`drillbook data where` prints the one "
                        f"in use)")
    return base, source


def _unwritable(folder: Path, source: str, err: OSError) -> DataError:
    """One line: a corpus folder that cannot be made or written, and the fix."""
    return DataError(f"cannot write the corpus folder {folder} ({err.strerror or err}; the "
                     f"data root is taken from {source}); set ${DATA_ENV} to a folder that "
                     f"can be written, or copy the corpus there yourself")


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The folder that holds one sub-folder per corpus.

    Every benchmark in the book is one of a few public corpora. This module holds

    * the **registry** :data:`CORPORA`: for each corpus its folder, its files, the sha256 of
      each file, a public download address, the expected vocabulary size and token counts,
      and its licence (:class:`CorpusSpec`);
    * the **location rule**, the one rule that tests, the command line and the notebooks
      all use to find a file (:func:`data_root`, :func:`corpus_file`)::

          <root>/<subdir>/<filename>          e.g.  ~/.cache/drillbook/ptb/ptb.train.txt

      where ``<root>`` is, in order of precedence: the ``root`` argument, else the
      environment variable ``$DRILLBOOK_DATA`` (:data:`DATA_ENV`), else the user cache folder
      ``$XDG_CACHE_HOME/drillbook`` or ``~/.cache/drillbook``;
    * **download** with checksums (:func:`download`): a file is streamed into a temporary
      file next to its destination, hashed while it streams, and moved into place with one
      atomic ``os.replace`` only if its sha256 matches the registry. A file with the wrong
      bytes is deleted and never cached (:class:`ChecksumError`);
    * **verification** of files already on disk (:func:`verify`), and of the files a corpus
      is loaded from (:func:`check_sha256`, which :func:`drillbook.data.load_corpus` calls).

    Every function reads the environment when it is called, so ``monkeypatch.setenv`` in a
    test or ``os.environ[...] = ...`` in a notebook takes effect at once. The only memory
    kept between calls is :func:`check_sha256`'s table of file hashes, keyed by path, size,
    modification time and inode, so that loading the same unchanged file again costs nothing.

    Precedence: the ``root`` argument, else ``$DRILLBOOK_DATA`` (if set and non-empty),
    else ``$XDG_CACHE_HOME/drillbook`` (if that variable holds an absolute path), else
    ``~/.cache/drillbook``. The folder need not exist; nothing is created here.
    """
    return _root_and_source(root)[0]


def data_root_source(root: str | os.PathLike | None = None) -> str:
    """Which rule of :func:`data_root` chose the folder, in words: ``"$DRILLBOOK_DATA"``,
    ``"the default cache folder (~/.cache/drillbook)"``, ... (an empty ``$DRILLBOOK_DATA``
    counts as unset, as it does for :func:`data_root`)."""
    return _root_and_source(root)[1]


def _how_to_get(spec: CorpusSpec, filename: str) -> str:
    return (
        f"To get it, run `drillbook data download {spec.name}` (or call "
        f"drillbook.data.download({spec.name!r})), or set ${DATA_ENV} to a folder that "
        f"holds {spec.subdir}/{filename}."
    )


def corpus_file(
    name: str,
    split: str,
    root: str | os.PathLike | None = None,
    download: bool = False,
) -> Path:
    """Path of one split of a registered corpus: ``data_root(root) / subdir / filename``.

    Args:
        name: a key of :data:`CORPORA`.
        split: one of the corpus' splits (``"train"``, ``"valid"``, ``"test"``).
        root: data root; see :func:`data_root` for the default.
        download: fetch the corpus (all its files, checksum-verified) if this one is missing.

    Raises:
        DataError: unknown corpus or split (the message lists the valid ones).
        MissingFileError: the file is missing and ``download=False``; the message gives
            the exact path looked at, where the root came from, and how to get the file.
            (A ``FileNotFoundError``.)
    """
    spec = corpus_spec(name)
    filename = spec.filename(split)
    base, source = _usable_root(root)
    path = base / spec.subdir / filename
    if path.is_file():
        return path
    if download:
        _download(spec, base, source, force=False, opener=None)
        return path
    raise MissingFileError(
        f"{spec.name} {split} split not found: no file at {path} (data root {base} taken "
        f"from {source}). {_how_to_get(spec, filename)}"
    )


# -------------------------------------------------------------------- verification
class ChecksumError(DataError):
    """A file's sha256 differs from the registry's.

    Attributes:
        path: the file concerned (for a download: where it would have been saved).
        expected, actual: sha256 hex digests.
    """

    def __init__(self, message: str, *, path: Path, expected: str, actual: str) -> None:
        super().__init__(message)
        self.path = path
        self.expected = expected
        self.actual = actual


class DownloadError(DataError, ConnectionError):
    """A corpus file could not be fetched (network down, address gone, timeout)."""


@dataclass(frozen=True)
class FileCheck:
    """Result of checking one file against the registry.

    Attributes:
        path: the file checked.
        expected: the registry's sha256.
        actual: the file's sha256, or ``None`` when the file is missing.
    """

    path: Path
    expected: str
    actual: str | None

    @property
    def ok(self) -> bool:
        """The file exists and its sha256 matches."""
        return self.actual == self.expected

    @property
    def missing(self) -> bool:
        return self.actual is None


def sha256_file(path: str | os.PathLike, chunk_size: int = _CHUNK) -> str:
    """sha256 hex digest of a file, read ``chunk_size`` bytes at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


@functools.lru_cache(maxsize=256)
def _sha256_memo(path: str, size: int, mtime_ns: int, inode: int) -> str:
    return sha256_file(path)


def check_sha256(name: str, paths: Mapping[str, str | os.PathLike]) -> None:
    """Check the files a corpus is being loaded from against the registry's sha256.

    A file's hash is remembered under its path, size, modification time and inode, so a
    repeated load of an unchanged file does not read it again (PTB hashes in ~10 ms).

    Args:
        name: a key of :data:`CORPORA`.
        paths: split -> the file read for it.

    Raises:
        ChecksumError: a file's sha256 differs (the message names the file and the fix).
    """
    spec = corpus_spec(name)
    for split, path in paths.items():
        path = Path(path)
        expected = spec.sha256[spec.filename(split)]
        st = path.stat()
        actual = _sha256_memo(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
        if actual != expected:
            raise ChecksumError(
                f"{path} is not the published {spec.name} {split} file (sha256 "
                f"{actual[:16]}..., expected {expected[:16]}...): re-download it with "
                f"`drillbook data download {spec.name} --force`, or point ${DATA_ENV} at "
                f"a verified copy",
                path=path, expected=expected, actual=actual,
            )


def verify(name: str, root: str | os.PathLike | None = None) -> list[FileCheck]:
    """Check every file of corpus ``name`` under the data root against its sha256.

    Returns:
        one :class:`FileCheck` per file, in split order; ``all(c.ok for c in checks)``
        means the corpus is complete and unaltered. Nothing is raised for missing or
        altered files: the caller decides.
    """
    spec = corpus_spec(name)
    folder = _usable_root(root)[0] / spec.subdir
    checks = []
    for filename in spec.files.values():
        path = folder / filename
        actual = sha256_file(path) if path.is_file() else None
        checks.append(FileCheck(path, spec.sha256[filename], actual))
    return checks


# ------------------------------------------------------------------------ download
Opener = Callable[[str], IO[bytes]]


def _urlopen(url: str) -> IO[bytes]:
    return urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT)


def _network_error(url: str, spec: CorpusSpec, folder: Path,
                   exc: BaseException) -> DownloadError:
    """One line: the corpus, the address, what went wrong and where to put the files."""
    reason = " ".join(str(exc).split())  # some network errors span several lines
    return DownloadError(
        f"could not download the {spec.name} corpus: {url} failed ({type(exc).__name__}: "
        f"{reason}). If this machine is offline, copy the {spec.name} files from a machine "
        f"that has them into {folder}/ (`drillbook data where` prints the data folder), or "
        f"set ${DATA_ENV} to a folder that holds {spec.subdir}/."
    )


def _fetch(url: str, dest: Path, expected: str, spec: CorpusSpec, folder: Path,
           opener: Opener, source: str) -> None:
    """Stream ``url`` into a temp file beside ``dest``; move it into place if the hash matches.

    ``folder`` is the corpus folder (``<root>/<subdir>``) that network errors point to;
    ``source`` says where the data root was taken from.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part",
                                        dir=dest.parent)
    except OSError as err:
        raise _unwritable(dest.parent, source, err) from None
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                response = opener(url)
            except (urllib.error.URLError, OSError) as exc:
                raise _network_error(url, spec, folder, exc) from exc
            try:
                while True:
                    try:
                        chunk = response.read(_CHUNK)
                    except (urllib.error.URLError, OSError) as exc:
                        raise _network_error(url, spec, folder, exc) from exc
                    if not chunk:
                        break
                    digest.update(chunk)
                    out.write(chunk)
            finally:
                close = getattr(response, "close", None)
                if close is not None:
                    close()
        actual = digest.hexdigest()
        if actual != expected:
            raise ChecksumError(
                f"checksum mismatch for {dest.name} downloaded from {url}: expected sha256 "
                f"{expected}, got {actual}; the file was not saved. The download may be "
                f"truncated or the server's copy changed: retry, or put a verified copy at "
                f"{dest} (or under ${DATA_ENV}).",
                path=dest, expected=expected, actual=actual,
            )
        try:
            os.chmod(tmp, 0o644)  # mkstemp made it private; a cache is readable like any file
            os.replace(tmp, dest)  # atomic: readers see the old state or the whole file
        except OSError as err:
            raise _unwritable(dest.parent, source, err) from None
    finally:
        tmp.unlink(missing_ok=True)


def download(
    name: str,
    root: str | os.PathLike | None = None,
    *,
    force: bool = False,
    opener: Opener | None = None,
) -> list[Path]:
    """Fetch every file of corpus ``name`` into ``data_root(root) / subdir``.

    Each file is streamed into a temporary file in the target folder and hashed on the
    way; only if its sha256 matches the registry is it moved into place (atomically, with
    ``os.replace``). Files already present with the right hash are kept as they are.

    Args:
        name: a key of :data:`CORPORA`.
        root: data root; see :func:`data_root`.
        force: download even files that are already present and correct, and replace
            present files whose hash is wrong (without ``force`` those raise).
        opener: ``url -> binary file-like`` with ``.read(n)``; default
            :func:`urllib.request.urlopen` with a ``DOWNLOAD_TIMEOUT`` timeout.
            Tests pass a fake one.

    Returns:
        the paths of all the corpus' files, in split order.

    Raises:
        ChecksumError: a download (or, without ``force``, a file already present) has
            the wrong sha256. A bad download leaves no file behind.
        DownloadError: the network failed; the message names the address.
        DataError: unknown corpus, or one without a download address for some file.
    """
    return _download(corpus_spec(name), *_usable_root(root), force=force, opener=opener)


def _download(spec: CorpusSpec, root: Path, source: str, *, force: bool,
              opener: Opener | None) -> list[Path]:
    opener = opener if opener is not None else _urlopen
    folder = root / spec.subdir
    paths = []
    for filename in spec.files.values():
        dest = folder / filename
        expected = spec.sha256[filename]
        paths.append(dest)
        if dest.is_file() and not force:
            actual = sha256_file(dest)
            if actual == expected:
                continue
            raise ChecksumError(
                f"{dest} exists but its sha256 is {actual}, expected {expected}: it is not "
                f"the published {spec.name} file. Delete it, or replace it with "
                f"drillbook.data.download({spec.name!r}, force=True).",
                path=dest, expected=expected, actual=actual,
            )
        url = spec.urls.get(filename)
        if url is None:
            raise DataError(
                f"corpus {spec.name!r} has no download address for {filename}; put the "
                f"file at {dest} yourself (or under ${DATA_ENV}/{spec.subdir}/)"
            )
        _fetch(url, dest, expected, spec, folder, opener, source)
    return paths
