"""Whether a shared library is whole before it is loaded.

`dlopen()` maps a library's segments where its program headers say they are in the file.
A segment that runs past the end of a truncated file is mapped all the same, and the
first touch of a page beyond the end kills the process with SIGBUS: no exception, no
chance to rebuild. A cache entry's hash only proves that the file is the one that was
published; this proves that the file holds every byte its own headers point at, so a
library that was truncated before it was published (a full disk, an interrupted copy of
a cache) is rebuilt instead of loaded. Garbage and empty files fail the same check.

This module imports nothing from `tilejit`.
"""

from __future__ import annotations

import io
import os
import struct

__all__ = ["problem", "problem_in"]

# e_ident[EI_CLASS] and e_ident[EI_DATA].
_CLASS_32, _CLASS_64 = 1, 2
_LITTLE, _BIG = 1, 2
# The ELF header after e_ident (16 bytes), and one program header, per class:
# (e_type .. e_shstrndx), and (p_type, p_offset, p_filesz) at their places.
_HEADER = {_CLASS_32: "HHIIIIIHHHHHH", _CLASS_64: "HHIQQQIHHHHHH"}
_PHDR = {_CLASS_32: "IIIIII", _CLASS_64: "IIQQQQ"}


def problem(path: str | os.PathLike) -> str | None:
    """Return why the ELF file at `path` cannot be loaded safely, or None when its header,
    program headers, segments and section headers all lie within the file.

    Example:
        >>> problem("/usr/lib/x86_64-linux-gnu/libc.so.6") is None
        True
    """
    try:
        with open(path, "rb") as handle:
            return _problem(handle, os.fstat(handle.fileno()).st_size)
    except OSError as exc:
        return f"unreadable: {exc}"


def problem_in(data: bytes) -> str | None:
    """`problem` of a library held in memory (a prebuilt kernel before it is stored).

    Example:
        >>> problem_in(b"not a library")
        'not an ELF file (13 bytes)'
    """
    return _problem(io.BytesIO(data), len(data))


def _problem(handle, size: int) -> str | None:
    ident = handle.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        return f"not an ELF file ({size} bytes)"
    elf_class, data = ident[4], ident[5]
    if elf_class not in _HEADER or data not in (_LITTLE, _BIG):
        return f"unknown ELF class {elf_class} or data encoding {data}"
    order = "<" if data == _LITTLE else ">"
    header = struct.Struct(order + _HEADER[elf_class])
    raw = handle.read(header.size)
    if len(raw) < header.size:
        return f"truncated: the ELF header needs {16 + header.size} bytes, the file has {size}"
    fields = header.unpack(raw)
    phoff, shoff = fields[4], fields[5]
    phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
    end = phoff + phentsize * phnum
    if end > size:
        return f"truncated: the program headers end at byte {end}, the file has {size}"
    if shnum and shoff + shentsize * shnum > size:
        return (f"truncated: the section headers end at byte "
                f"{shoff + shentsize * shnum}, the file has {size}")
    entry = struct.Struct(order + _PHDR[elf_class])
    if phnum and phentsize < entry.size:
        return f"program header entries of {phentsize} bytes are too small"
    for index in range(phnum):
        handle.seek(phoff + index * phentsize)
        values = entry.unpack(handle.read(entry.size))  # within the file: checked
        # 32-bit: p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz;
        # 64-bit: p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz.
        offset, filesz = (values[1], values[4]) if elf_class == _CLASS_32 else \
            (values[2], values[5])
        if filesz and offset + filesz > size:
            return (f"truncated: segment {index} ends at byte {offset + filesz}, the "
                    f"file has {size}")
    return None
