"""Setuptools hooks (metadata is in pyproject.toml, options in setup.cfg).

A regular build (`pip install .`, `pip wheel .`) also builds tilejit's C core and its
Cython wrapper for the building interpreter into the package, `tilejit/_prebuilt/`
(`build_tools/prebuilt.py`): an installed tilejit then runs its first kernel without
building either, and runs kernels already compiled (exported or cached) on a machine with
no C compiler. That makes the wheel platform-specific. An editable install
(`pip install -e .`) builds nothing here: the core and the wrapper are built on first
use and cached, as for any other interpreter.
"""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class BuildWithCore(build_py):
    """build_py, then the core and the wrapper into the built package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        sys.path.insert(0, str(Path(__file__).resolve().parent))  # this tree's build_tools
        from build_tools import prebuilt

        target = Path(self.build_lib) / "tilejit" / "_prebuilt"
        if target.exists():
            import shutil

            shutil.rmtree(target)
        manifest = prebuilt.prebuild(target)
        print(f"tilejit: prebuilt core {manifest['core']} and wrapper "
              f"{next(iter(manifest['wrappers'].values()))['path']}")


class PlatformDistribution(Distribution):
    """The package carries compiled libraries: its wheel is tagged for this platform and
    Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCore}, distclass=PlatformDistribution)
