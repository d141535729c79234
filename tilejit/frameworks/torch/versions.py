"""The torch releases tilejit supports and is tested on, and what it says outside them.

tilejit supports torch 2.9 (the oldest: a year of releases) to 2.14 (the newest the
project's tests install). Every release of that range behaves the same through tilejit:
the same results, messages and gradients. What differs is how: each fast path that reads
torch's internals checks itself when it loads, on the running torch, and turns itself off
where it does not match (``python -m tilejit doctor`` says which and why); the public
fallbacks give the same answers. Outside the range tilejit still runs, with the same
checks, and says once that this torch was not tested (``TorchVersionWarning``).
"""

from __future__ import annotations

import re
import warnings

OLDEST = (2, 9)
NEWEST = (2, 14)
RANGE = f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"
# The releases the test suite runs on, fast paths on and off (.ci/torch-range, the
# README's test command for the middle one): the releases every torch fast path was
# verified on.
TESTED = ("2.9.1", "2.13.0", "2.14.1")


class TorchVersionWarning(UserWarning):
    """torch is outside the range of releases tilejit is tested with."""


def release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string (``"2.14.1+cu130"`` -> ``(2, 14)``);
    ``(0, 0)`` when it cannot be read."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def inside(version: str) -> bool:
    """Whether torch ``version`` is one of the supported releases (any patch release)."""
    return OLDEST <= release(version) <= NEWEST


def describe(version: str) -> str:
    """``version`` and where it stands against the range, for ``doctor``."""
    where = "inside" if inside(version) else "OUTSIDE"
    return f"{version} ({where} the supported range {RANGE}; tested on {', '.join(TESTED)})"


_warned: list = []


def warn_outside(version: str) -> None:
    """Warns once per process when torch ``version`` is outside the supported range."""
    if _warned or inside(version):
        return
    _warned.append(version)
    warnings.warn(
        f"tilejit supports torch {RANGE} (tested on {', '.join(TESTED)}); this is torch "
        f"{version}. Kernels run with the same checks, and every fast path checks itself "
        "against this torch before use (python -m tilejit doctor lists them), but this "
        "release has not been tested: install a torch within the range, or report what "
        "differs", TorchVersionWarning, stacklevel=3)
