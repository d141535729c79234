"""The `build_tools` package as tilejit reaches it, in one place.

Installed, `build_tools/` is the subpackage `tilejit._build_tools`. In a source checkout
it is the checkout's own top-level `build_tools/`, loaded here under that same name, so
that a clone builds its own core and wrapper even where an editable install of another
checkout maps `tilejit._build_tools` elsewhere. Every module of tilejit imports it from
here, so one process never holds two copies of it (two locks, two memos).
Dependencies run one way: tilejit -> build_tools -> core.

`disk_cache`, `elf`, `env`, `scratch` and `toolchain` are imported at once (all cheap); the
core and wrapper builds load on first use, through `build_tools.build_core_library` /
`load_wrapper`.
"""

import importlib.util
import sys
from pathlib import Path


def _checkout_build_tools() -> None:
    """Loads the checkout's `build_tools/` as `tilejit._build_tools` when this package sits
    in a tilejit source checkout (beside `build_tools/` and `core/include/tilejit/`)."""
    root = Path(__file__).resolve().parents[2]
    init = root / "build_tools" / "__init__.py"
    name = "tilejit._build_tools"
    if name in sys.modules or not init.is_file():
        return
    if not (root / "core" / "include" / "tilejit").is_dir():
        return
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_checkout_build_tools()

from .. import _build_tools as build_tools
from .._build_tools import disk_cache, elf, env, scratch, toolchain

__all__ = ["build_tools", "disk_cache", "elf", "env", "scratch", "toolchain"]
