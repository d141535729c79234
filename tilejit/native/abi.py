"""The C core's ABI constants, read from its headers: the one place they are declared.

Every number Python shares with the core (limits, status codes and the exception class
each maps to, argument kinds and flags, parameter kinds, buffer flags, targets,
producer steps, DLPack device types, dtype codes and flags, the DLPack version,
``TJ_VERSION``) comes from the headers under ``core/include`` (``tilejit/*.h`` and the
vendored ``dlpack/dlpack.h``) — shipped with the package as ``tilejit/_core/include`` —
parsed here at import (well under a millisecond).
A test compiles the headers and checks every value read here against the C compiler's,
so the parser cannot misread silently.

>>> from tilejit import abi
>>> abi.TJ_ARG_OBJECT, abi.kDLCUDA, abi.STATUS_EXCEPTIONS[abi.TJ_EVALUE]
(7, 2, 'ValueError')
"""

from __future__ import annotations

import re
from pathlib import Path

# Paths under the include directory.
HEADERS = ("tilejit/core.h", "tilejit/producer.h", "tilejit/host.h", "dlpack/dlpack.h",
           "tilejit/layout.h", "tilejit/xla.h", "tilejit/torch.h")

_DEFINE = re.compile(r"^#define[ \t]+((?:TJ|DLPACK)_\w+)[ \t]+(.+?)\s*(?:/\*.*)?$", re.MULTILINE)
_ENUM_BODY = re.compile(r"enum\s*\w*\s*\{([^}]*)\}")
_ENUM_ITEM = re.compile(r"^\s*(\w+)\s*=\s*(-?\d+)U?\s*,?", re.MULTILINE)
_STATUS = re.compile(r"X\((TJ_\w+),\s*(-?\d+),\s*\"(\w*)\"\)")
_SHIFT = re.compile(r"^\((\d+)UL?\s*<<\s*(\d+)UL?\)$")


def include_dir() -> Path:
    """Where the core's public headers are (the directory holding ``tilejit/`` and
    ``dlpack/``): the package's copy when installed, the checkout's ``core/include``
    otherwise."""
    here = Path(__file__).resolve().parent.parent  # the package
    for candidate in (here / "_core" / "include", here.parent / "core" / "include"):
        if (candidate / "tilejit" / "tilejit.h").is_file():
            return candidate
    raise ImportError(f"tilejit: the core's headers are missing (looked beside {here})")


def _value(text: str):
    text = text.strip()
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    shift = _SHIFT.match(text)
    if shift:
        return int(shift.group(1)) << int(shift.group(2))
    return int(text.rstrip("uUlL"))


def parse(directory: Path | None = None) -> tuple[dict, dict]:
    """``(constants, status_exceptions)`` from the headers in ``directory``."""
    directory = directory or include_dir()
    constants: dict[str, object] = {}
    statuses: dict[int, str] = {}
    for name in HEADERS:
        text = (directory / name).read_text()
        for match in _DEFINE.finditer(text):
            try:
                constants[match.group(1)] = _value(match.group(2))
            except ValueError:
                continue  # a macro, not a value (include guards have none)
        for body in _ENUM_BODY.findall(text):
            for item, value in _ENUM_ITEM.findall(body):
                constants[item] = int(value)
        for item, value, exception in _STATUS.findall(text):
            constants[item] = int(value)
            statuses[int(value)] = exception
    return constants, statuses


_constants, STATUS_EXCEPTIONS = parse()
globals().update(_constants)
NAMES = tuple(sorted(_constants))  # every constant read, for the drift test
