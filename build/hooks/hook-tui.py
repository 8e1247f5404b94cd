"""tui: the Textual app's stylesheets (.tcss, one per screen) are read from disk next to the modules."""
from PyInstaller.utils.hooks import collect_data_files, collect_submodules

datas = collect_data_files("tui", includes=["**/*.tcss"])
hiddenimports = collect_submodules("tui")
