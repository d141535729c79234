"""Building the Cython wrapper and the C core for the running interpreter, with their cache.

Installed as `tilejit._build_tools`; importable as `build_tools` from a checkout's root.
The public names are those of `wrapper_build.__all__`.
"""

from . import wrapper_build
from .wrapper_build import *  # re-exports exactly wrapper_build.__all__

__all__ = list(wrapper_build.__all__)
