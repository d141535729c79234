"""The core and wrapper a package build made: `pip install .` and `pip wheel .` build
them for the building interpreter into the package, so that an installed tilejit runs its
first kernel without building either (and without a C compiler, for kernels already
compiled).

They live in `tilejit/_prebuilt/`, a read-only cache root with the cache's own layout
(`core/<key>/...`, `wrapper/<abi>/<key>/...`, each entry with its `meta.json`), described
by `manifest.json`::

    {"format": 1, "core_key": "<core_source_hash>", "core": "core/<key>/libtilejit_core-<key>.so",
     "wrappers": {"<abi_tag>": {"path": "...", "sources": "<wrapper_sources_key>"}}}

At run time the core is taken from there when the sources' key (`core_source_hash`,
which covers `$TILEJIT_CC` too) is the one built, and the wrapper when the interpreter's
ABI and the wrapper's sources are; anything else is built into the cache as before. Keys
are content hashes, so a checkout whose sources are those of the installed tilejit (the
README's `pip install . && python -m tilejit demo`, run from the checkout, imports the
checkout) uses the installed distribution's `_prebuilt` too. `setup.py` calls `prebuild`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from . import disk_cache, elf

ROOT = Path(__file__).resolve().parent.parent / "_prebuilt"  # installed: tilejit/_prebuilt
MANIFEST = "manifest.json"
_FORMAT = 1
_manifest: list = []  # read once per process


def _installed_roots() -> list[Path]:
    """The `_prebuilt` directories of installed tilejit distributions (a checkout's own
    egg-info, which `sys.path` may list first, has none)."""
    try:
        from importlib.metadata import distributions

        try:
            found = list(distributions(name="tilejit"))  # Python 3.10+: a directory lookup
        except TypeError:  # Python 3.9: every distribution, by name
            found = [d for d in distributions()
                     if (d.metadata["Name"] or "").lower() == "tilejit"]
        return [Path(d.locate_file("tilejit/_prebuilt")) for d in found]
    except (ImportError, OSError, ValueError):
        return []


def _read() -> dict:
    """The manifest (with its `root`) of this package's prebuilt directory, else of an
    installed distribution's; {} when there is none."""
    if not _manifest:
        found: dict = {}
        roots = [ROOT] if (ROOT / MANIFEST).is_file() else [ROOT, *_installed_roots()]
        for root in roots:
            try:
                loaded = json.loads((root / MANIFEST).read_text())
            except (OSError, ValueError, TypeError):
                continue
            if isinstance(loaded, dict) and loaded.get("format") == _FORMAT:
                found = {**loaded, "root": root}
                break
        _manifest.append(found)
    return _manifest[0]


def _whole(relative: str) -> Path | None:
    """The prebuilt artifact at `relative`, if it matches its meta.json and is whole."""
    artifact = Path(_read()["root"]) / relative
    return artifact if disk_cache.valid(artifact, elf.problem) else None


def core(core_key: str) -> Path | None:
    """The prebuilt core library for sources of key `core_key`, or None."""
    manifest = _read()
    if manifest.get("core_key") != core_key or not isinstance(manifest.get("core"), str):
        return None
    return _whole(manifest["core"])


def wrapper(core_key: str, sources: str, abi: str) -> Path | None:
    """The prebuilt wrapper for this ABI, built over the core of key `core_key` from
    wrapper sources of key `sources`, or None."""
    manifest = _read()
    entry = manifest.get("wrappers", {}).get(abi)
    if manifest.get("core_key") != core_key or not isinstance(entry, dict) or \
            entry.get("sources") != sources or not isinstance(entry.get("path"), str):
        return None
    return _whole(entry["path"])


def prebuild(target: Path) -> dict:
    """Builds the core and this interpreter's wrapper into `target` (a package's
    `tilejit/_prebuilt`) and writes its manifest; returns the manifest."""
    from .core_build import core_source_hash
    from .wrapper_build import abi_tag, build_wrapper, wrapper_sources_key

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
    manifest = {"format": _FORMAT, "core_key": key,
                "core": str(core_path.relative_to(target)),
                "wrappers": {abi_tag(): {"path": str(wrapper_path.relative_to(target)),
                                         "sources": wrapper_sources_key(key)}}}
    (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
