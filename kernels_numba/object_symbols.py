"""The symbols an ELF object file defines, read from its symbol table (no LLVM involved).

numba records which symbols each cached kernel defines (it looks a name up only if it is defined: an unknown name
makes LLVM's JIT exit the process) by parsing the kernel's LLVM bitcode, which costs time and memory on every
start; the same names are in the kernel's object code, which is loaded anyway (numba_cache_load.py).
"""
from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")  # name type flags addr offset size link info addralign entsize
_SYMBOL = struct.Struct("<IBBHQQ")  # name info other shndx value size
_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_NAMED_TYPES = (0, 1, 2)  # STT_NOTYPE, STT_OBJECT, STT_FUNC (not sections or files)


def defined_symbols(object_code: bytes) -> frozenset[str] | None:
    """Names of the functions and data an ELF64 little-endian object defines; None for any other format (the
    caller then asks LLVM)."""
    if object_code[:4] != _ELF_MAGIC or object_code[4:6] != b"\x02\x01":  # 64-bit, little-endian
        return None
    section_offset = struct.unpack_from("<Q", object_code, 0x28)[0]
    entry_size, count = struct.unpack_from("<HH", object_code, 0x3A)
    sections = [_SECTION_HEADER.unpack_from(object_code, section_offset + i * entry_size) for i in range(count)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind == _SHT_SYMTAB:
            names |= _symbol_names(object_code, object_code[offset:offset + size], sections[link][4])
    return frozenset(names)


def _symbol_names(object_code: bytes, table: bytes, strings_offset: int) -> set[str]:
    names = set()
    for name_offset, info, _, section, _, _ in _SYMBOL.iter_unpack(table):
        if section != _SHN_UNDEF and name_offset and info & 0xF in _NAMED_TYPES:
            start = strings_offset + name_offset
            names.add(object_code[start:object_code.index(b"\0", start)].decode())
    return names
