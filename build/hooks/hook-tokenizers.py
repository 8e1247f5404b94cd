"""tokenizers: the Rust extension registers its submodules (models, pre_tokenizers, ...) from inside the .so."""
from PyInstaller.utils.hooks import collect_data_files, collect_submodules

hiddenimports = collect_submodules("tokenizers", filter=lambda name: not name.startswith("tokenizers.tools"))
datas = collect_data_files("tokenizers", excludes=["**/*.pyi"])
