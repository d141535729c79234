"""The core and wrapper a package build makes: `pip install .` and `pip wheel .` build
them for the building interpreter into the package, so that an installed tilejit runs its
first kernel without building either (and without a C compiler, for kernels already
compiled). `setup.py` calls `prebuild`.

They go into `tilejit/_prebuilt/`, a read-only cache root with the cache's own layout,
described by `manifest.json`; `prebuilt_lookup` gives the format and finds them at run
time. This module is above both builds (it runs them); they use `prebuilt_lookup`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from . import disk_cache
from .core_build import core_source_hash
from .prebuilt_lookup import FORMAT, MANIFEST
from .wrapper_build import abi_tag, build_wrapper, wrapper_sources_key


def prebuild(target: Path) -> dict:
    """Builds the core and this interpreter's wrapper into `target` (a package's
    `tilejit/_prebuilt`) and writes its manifest; returns the manifest."""
    target = Path(target).absolute()
    saved = os.environ.get("TILEJIT_CACHE_DIR")
    os.environ["TILEJIT_CACHE_DIR"] = str(target)
    try:
        wrapper_path = build_wrapper()  # builds the core first
    finally:
        if saved is None:
            os.environ.pop("TILEJIT_CACHE_DIR", None)
        else:
            os.environ["TILEJIT_CACHE_DIR"] = saved
    key = core_source_hash()
    core_path = next((target / "core" / key).glob("libtilejit_core-*.so"))
    (core_path.parent / "libtilejit.so").symlink_to(core_path.name)  # for -ltilejit
    # What a build leaves beside the entries: lock files and build directories.
    for path in list(target.rglob("*")):
        if path.name.endswith(".lock") and path.is_file():
            path.unlink()
        elif path.name.startswith(disk_cache.TMP_PREFIX) and path.is_dir():
            shutil.rmtree(path)
    manifest = {"format": FORMAT, "core_key": key,
                "core": str(core_path.relative_to(target)),
                "wrappers": {abi_tag(): {"path": str(wrapper_path.relative_to(target)),
                                         "sources": wrapper_sources_key(key)}}}
    (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
