"""Building the Cython wrapper and the C core for the running interpreter, with their cache.

Installed as `tilejit._build_tools`; importable as `build_tools` from a checkout's root.
"""

from .wrapper_build import (
    WRAPPER_MODULE,
    abi_tag,
    build_core_library,
    build_wrapper,
    cache_root,
    core_library_path,
    core_source_hash,
    load_wrapper,
    source_dirs,
    source_hash,
    wrapper_path,
)

__all__ = [
    "WRAPPER_MODULE",
    "abi_tag",
    "build_core_library",
    "build_wrapper",
    "cache_root",
    "core_library_path",
    "core_source_hash",
    "load_wrapper",
    "source_dirs",
    "source_hash",
    "wrapper_path",
]
