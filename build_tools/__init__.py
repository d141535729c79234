"""Building the C core and the Cython wrapper for the running interpreter, with their cache.

Installed as `tilejit._build_tools`; importable as `build_tools` from a checkout's root.
Nothing here imports `tilejit`.

- `disk_cache`: the one on-disk cache (locking, atomic publish, validation, the fallback
  to a private root), also used by tilejit for kernels and the benchmark;
- `elf`: whether a shared library is whole before it is loaded;
- `env`: the `TILEJIT_*` environment variables, read and checked in one place;
- `scratch`: temporary directories, and the sweep of killed processes' leftovers;
- `toolchain`: finding and running the C compiler (`find_executable`, `c_compiler`);
- `prebuilt_lookup`: the core and wrapper a package build made, found by the keys its
  callers pass in;
- `core_build`: the core as a shared library, the one every backend uses;
- `wrapper_build`: the Cython extension, linked against that library, and its import;
- `prebuilt`: `prebuild`, which `setup.py` calls to build both into a package;
- `__main__`: `python -m build_tools`.

The modules form layers, each importing only modules of the layers above it, at module
level: no function imports a module of this package (the imports deferred to a function
are of the standard library and of Cython, an optional dependency)::

    env, scratch                    the standard library only
    disk_cache, elf, toolchain      env, scratch and the standard library
    prebuilt_lookup                 disk_cache, elf
    core_build                      disk_cache, elf, prebuilt_lookup, toolchain
    wrapper_build                   core_build and everything core_build uses
    prebuilt, __main__              core_build, wrapper_build (prebuilt: also disk_cache,
                                    prebuilt_lookup)

tests/test_layering.py checks that no import cycle appears.

The names of `core_build.__all__` and `wrapper_build.__all__` are importable from here.
Submodules are imported on first use, so `tilejit.compiler` can ask `toolchain` for the
compiler without importing the wrapper build.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "adopt_core_library": "core_build",
    "build_core_library": "core_build",
    "build_torch_op_library": "core_build",
    "core_library_path": "core_build",
    "core_source_hash": "core_build",
    "load_core_library": "core_build",
    "source_dirs": "core_build",
    "WRAPPER_MODULE": "wrapper_build",
    "abi_tag": "wrapper_build",
    "build_wrapper": "wrapper_build",
    "load_wrapper": "wrapper_build",
    "source_hash": "wrapper_build",
    "wrapper_path": "wrapper_build",
    "cache_root": "disk_cache",
}

__all__ = [  # the keys of _EXPORTS
    "WRAPPER_MODULE",
    "abi_tag",
    "adopt_core_library",
    "build_core_library",
    "build_torch_op_library",
    "build_wrapper",
    "cache_root",
    "core_library_path",
    "core_source_hash",
    "load_core_library",
    "load_wrapper",
    "source_dirs",
    "source_hash",
    "wrapper_path",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
