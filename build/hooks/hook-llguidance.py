"""llguidance (structured output in `pocket serve`): reads its own version from the package metadata at import."""
from PyInstaller.utils.hooks import copy_metadata

datas = copy_metadata("llguidance")
