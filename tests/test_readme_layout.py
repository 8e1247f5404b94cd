"""The README's Layout section names every folder of the tree, and no folder that is gone.

An entry starts at column 0 with a top folder (`pocketcli/`); the folders it names (a word ending in `/`:
`engine/`, `engine/speculative/`) are paths from that top folder. The tree's folders: the top folders, every
package folder (one holding .py files) under gguf_loader/, kernels_numba/, pocketcli/ and tui/, and the first-level
folders of tests/, bench/, scripts/ and build/ that hold files (caches, hidden and empty folders left out).
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gguf_loader", "kernels_numba", "pocketcli", "tui")
OTHER_TOPS = ("build", "tests", "bench", "scripts")
FOLDER_WORD = re.compile(r"(?<![\w./-])([A-Za-z_][\w.-]*(?:/[\w.-]+)*)/(?![\w.-])")
SKIPPED = ("__pycache__", "__snapshots__")


def layout_block(readme: str) -> str:
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def named_folders(block: str) -> set[str]:
    named, top = set(), None
    for line in block.splitlines():
        if line[:1].strip():  # a new entry: its first word is the top folder
            top = line.split()[0].rstrip("/")
            named.add(top)
            line = line[len(top) + 1:]
        named |= {f"{top}/{word}" for word in FOLDER_WORD.findall(line)}
    return named


def _kept(folder: Path) -> bool:
    return not any(part.startswith(".") or part in SKIPPED for part in folder.relative_to(ROOT).parts)


def tree_folders() -> set[str]:
    folders = set(PACKAGES + OTHER_TOPS)
    for package in PACKAGES:
        folders |= {str(p.parent.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py") if _kept(p.parent)}
    for top in OTHER_TOPS:
        folders |= {str(p.relative_to(ROOT)) for p in (ROOT / top).iterdir()
                    if p.is_dir() and _kept(p) and any(f.is_file() for f in p.rglob("*"))}
    return folders


def test_layout_names_every_folder_and_no_stale_one():
    named = named_folders(layout_block((ROOT / "README.md").read_text()))
    tree = tree_folders()
    assert not tree - named, f"folders the README's Layout section does not name: {sorted(tree - named)}"
    stale = {f for f in named - tree if not (ROOT / f).is_dir()}
    assert not stale, f"folders the README's Layout section names that do not exist: {sorted(stale)}"


def test_folder_words_are_paths_from_their_entry():
    block = ("pocketcli/       engine/ (sequence, sampler), engine/speculative/ (drafters);\n"
             "                 models/, safetensors/HF checkpoints, cli.py\n"
             "tests/           kernels/, cuda/ (sim/ runs without a GPU)\n")
    assert named_folders(block) == {"pocketcli", "pocketcli/engine", "pocketcli/engine/speculative",
                                    "pocketcli/models", "tests", "tests/kernels", "tests/cuda", "tests/sim"}
