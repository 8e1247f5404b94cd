"""textual: `textual.widgets` loads each widget lazily by name (module __getattr__), so none is seen by analysis.

Drivers are picked per platform at run time; `textual.__version__` comes from the package metadata.
"""
from PyInstaller.utils.hooks import collect_data_files, collect_submodules, copy_metadata

hiddenimports = collect_submodules("textual.widgets") + collect_submodules("textual.drivers")
datas = collect_data_files("textual") + copy_metadata("textual")
