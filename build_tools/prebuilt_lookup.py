"""Finding the core and wrapper a package build made (`prebuilt.prebuild`), at run time.

They live in `tilejit/_prebuilt/`, a read-only cache root with the cache's own layout
(`core/<key>/...`, `wrapper/<abi>/<key>/...`, each entry with its `meta.json`), described
by `manifest.json`::

    {"format": 1, "core_key": "<core_source_hash>", "core": "core/<key>/libtilejit_core-<key>.so",
     "wrappers": {"<abi_tag>": {"path": "...", "sources": "<wrapper_sources_key>"}}}

The core is taken from there when the sources' key (`core_source_hash`, which covers
`$TILEJIT_CC` too) is the one built, and the wrapper when the interpreter's ABI and the
wrapper's sources are; anything else is built into the cache as before. Keys are content
hashes, so a checkout whose sources are those of the installed tilejit (the README's
`pip install . && python -m tilejit demo`, run from the checkout, imports the checkout)
uses the installed distribution's `_prebuilt` too.

The callers compute the keys (`core_build`, `wrapper_build`) and pass them in: this module
only reads the manifest, so it sits below both builds.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import disk_cache, elf

ROOT = Path(__file__).resolve().parent.parent / "_prebuilt"  # installed: tilejit/_prebuilt
MANIFEST = "manifest.json"
FORMAT = 1
_manifest: list = []  # read once per process


def _installed_roots() -> list[Path]:
    """The `_prebuilt` directories of tilejit packages installed on `sys.path` (a
    checkout's own egg-info, which `sys.path` may list first, has none). Looked up by path,
    not through `importlib.metadata`, whose import alone costs a start 20 ms."""
    import sys

    found = []
    for entry in sys.path:
        try:
            root = Path(entry or ".") / "tilejit" / "_prebuilt"
            if (root / MANIFEST).is_file() and root.resolve() not in found:
                found.append(root.resolve())
        except (OSError, ValueError):
            continue
    return found


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
            if isinstance(loaded, dict) and loaded.get("format") == FORMAT:
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
