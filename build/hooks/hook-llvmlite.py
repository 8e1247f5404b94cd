"""llvmlite: the LLVM shared library (libllvmlite) is loaded with ctypes, so analysis does not see it."""
from PyInstaller.utils.hooks import collect_dynamic_libs

binaries = collect_dynamic_libs("llvmlite")
