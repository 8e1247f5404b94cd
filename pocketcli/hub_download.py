"""One file from the Hugging Face hub (or the mirror HF_ENDPOINT names) into the models dir: a rich progress
bar, a partial file kept across runs so an interrupted download resumes, and a sha256 check before the file
takes its final name (a bad download is deleted, never left where a model is looked for)."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from gguf_loader import ModelFileError

SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")


class DownloadError(ModelFileError):
    """The hub said no, the connection failed, or the bytes are not the file they claim to be."""


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    filename: str
    url: str  # where the bytes are (the hub's redirect target for large files)
    etag: str  # sha256 of the content for LFS files (every GGUF), a git blob id otherwise
    size: int | None
    commit: str

    def expected_sha256(self, pinned: str = "") -> str:
        """The checksum to verify against: the registry's pin if any, else the hub's LFS etag."""
        if pinned:
            return pinned.lower()
        return self.etag if SHA256_PATTERN.fullmatch(self.etag) else ""


def hub_endpoint() -> str | None:
    """Read at call time (huggingface_hub reads HF_ENDPOINT once, at import)."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or None


def fetch_remote_file(repo: str, filename: str, revision: str = "main") -> RemoteFile:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError

    endpoint = hub_endpoint()
    url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, endpoint=endpoint)
    except RepositoryNotFoundError:
        raise DownloadError(f"no repository '{repo}' on {endpoint or 'the hub'} (or it is private)") from None
    except RemoteEntryNotFoundError:
        raise DownloadError(f"no file '{filename}' in {repo}@{revision}") from None
    except HfHubHTTPError as exc:
        raise DownloadError(f"{repo}/{filename}: {one_line(exc)}") from None
    except (OSError, *transport_errors()) as exc:
        raise DownloadError(f"cannot reach {endpoint or 'the hub'}: {one_line(exc)}") from None
    if not meta.commit_hash or not meta.etag:
        raise DownloadError(f"{endpoint or 'the hub'} does not answer like a Hugging Face hub (no commit or ETag)")
    return RemoteFile(repo, filename, meta.location, meta.etag, meta.size, meta.commit_hash)


def download(remote: RemoteFile, destination: Path, sha256: str = "", console=None) -> Path:
    """Fetches `remote` to `destination`, resuming a partial file from an earlier run of the same version."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(destination, remote.etag)
    remove_stale_partials(destination, keep=partial)
    fetch_into(remote, partial, console)
    expected = remote.expected_sha256(sha256)
    if expected and file_sha256(partial) != expected:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"checksum mismatch for {remote.repo}/{remote.filename} (expected sha256 "
                            f"{expected[:16]}…): the download was removed")
    os.replace(partial, destination)
    return destination


def fetch_into(remote: RemoteFile, partial: Path, console=None) -> None:
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    resume_size = partial.stat().st_size if partial.is_file() else 0
    if remote.size is not None and resume_size > remote.size:
        partial.unlink()
        resume_size = 0
    # the token stays on the hub; a redirect to a CDN gets no credentials
    headers = build_hf_headers() if same_origin(remote.url, hub_endpoint() or "https://huggingface.co") else {}
    with make_progress(console) as progress, open(partial, "ab") as handle, hub_progress_bars_off():
        task = progress.add_task(remote.filename, total=remote.size, completed=resume_size)
        try:
            http_get(remote.url, ProgressFile(handle, progress, task), resume_size=resume_size, headers=headers,
                     expected_size=remote.size, displayed_filename=remote.filename)
        except (OSError, *transport_errors()) as exc:
            handle.flush()
            raise DownloadError(f"download of {remote.repo}/{remote.filename} stopped at "
                                f"{partial.stat().st_size} bytes ({one_line(exc)}); "
                                f"run the same pull again to resume") from None


class ProgressFile:
    """The file huggingface_hub writes into, advancing our progress bar as it goes."""

    def __init__(self, handle, progress, task):
        self.handle, self.progress, self.task = handle, progress, task

    def write(self, data: bytes) -> int:
        self.progress.advance(self.task, len(data))
        return self.handle.write(data)

    def truncate(self, size: int | None = None) -> int:
        # the server ignored our Range header: the download restarts from zero
        size = self.handle.truncate(size)
        self.progress.update(self.task, completed=size)
        return size

    def __getattr__(self, name):
        return getattr(self.handle, name)


def make_progress(console=None):
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=console or Console(stderr=True))


class hub_progress_bars_off:
    """huggingface_hub would draw its own tqdm bar under ours."""

    def __enter__(self):
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars

        self.was_disabled = are_progress_bars_disabled()
        disable_progress_bars()

    def __exit__(self, *exc_info):
        from huggingface_hub.utils import enable_progress_bars

        if not self.was_disabled:
            enable_progress_bars()


def partial_path(destination: Path, etag: str) -> Path:
    """Named after the remote version, so a partial file is only resumed by the same bytes."""
    return destination.with_name(f".{destination.name}.{re.sub(r'[^0-9A-Za-z]', '', etag)[:16]}.part")


def partial_downloads(destination: Path) -> list[Path]:
    return sorted(destination.parent.glob(f".{destination.name}.*.part")) if destination.parent.is_dir() else []


def remove_stale_partials(destination: Path, keep: Path) -> None:
    for stale in partial_downloads(destination):
        if stale != keep:
            stale.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def same_origin(url: str, other: str) -> bool:
    a, b = urlparse(url), urlparse(other)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def transport_errors() -> tuple[type[Exception], ...]:
    """Connection errors of the HTTP client huggingface_hub uses (httpx2 in 1.x+, requests before)."""
    for module_name, attribute in (("httpx2", "HTTPError"), ("httpx", "HTTPError"),
                                   ("requests", "RequestException")):
        try:
            return (getattr(__import__(module_name), attribute),)
        except (ImportError, AttributeError):
            continue
    return ()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())[:300]
