"""pocketcli: the bundled model registry (models.toml), the subcommand modules, and the version.

`pocket --version` reads the installed metadata, or pyproject.toml beside the packages (a source checkout),
so the project's pyproject.toml goes to the bundle root when the project is not pip-installed.
"""
import os

from PyInstaller.utils.hooks import collect_data_files, collect_submodules, copy_metadata, get_package_paths

datas = collect_data_files("pocketcli", includes=["*.toml"])
hiddenimports = collect_submodules("pocketcli")
try:
    datas += copy_metadata("pocketllm")
except Exception:  # not pip-installed: building from a source checkout
    pyproject = os.path.join(get_package_paths("pocketcli")[0], "pyproject.toml")
    if os.path.isfile(pyproject):
        datas.append((pyproject, "."))
