"""The `build_tools` package as tilejit reaches it, in one place.

Installed, `build_tools/` is the subpackage `tilejit._build_tools`; in a source checkout
run from its root it is the top-level `build_tools`. Every module of tilejit imports it
from here, so one process never holds two copies of it (two locks, two memos).
Dependencies run one way: tilejit -> build_tools -> core.

`disk_cache`, `elf` and `toolchain` are imported at once (all cheap); the core and wrapper
builds load on first use, through `build_tools.build_core_library` / `load_wrapper`.
"""

try:
    from . import _build_tools as build_tools
    from ._build_tools import disk_cache, elf, toolchain
except ImportError:  # a source checkout on sys.path, not installed
    import build_tools
    from build_tools import disk_cache, elf, toolchain

__all__ = ["build_tools", "disk_cache", "elf", "toolchain"]
