"""prompt_toolkit (`pocket chat --plain`): `__version__` is read from the package metadata on first use."""
from PyInstaller.utils.hooks import copy_metadata

datas = copy_metadata("prompt_toolkit")
