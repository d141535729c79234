"""The fast paths: what tilejit reads of other projects' internals to make calls
cheaper, and the switch that turns every one of them off.

Each fast path has a public fallback that gives the same results and the same checks
(docs/fast-paths.md lists them); ``TILEJIT_FAST_PATHS=0`` in the environment makes
tilejit use only the fallbacks. Each fast path records here whether it is active and
why (``python -m tilejit doctor`` prints them).
"""

from __future__ import annotations

import threading

from ..native._build import env

FAST_PATHS = env.flag("TILEJIT_FAST_PATHS", default=True)
"""Whether tilejit may use its fast paths (``TILEJIT_FAST_PATHS=0`` switches them off);
read once, when tilejit is imported, which a value other than 1/true/yes/on/0/false/no/off
makes fail (``env.BadValue``)."""

_state: dict = {}  # fast path name -> (active, why), as decided


def state() -> dict:
    """``{name: (active, why)}`` of every fast path decided so far in this process."""
    return dict(_state)


def decided(name: str, active: bool, why: str) -> bool:
    """Records whether fast path ``name`` is active in this process, and why."""
    _state[name] = (active, why)
    return active


def in_fresh_thread(fn):
    """``fn()`` run on a new thread, its result returned or its exception raised here: the
    probes that check a fast path make tensors of their own, which must not see the
    caller's thread-local torch state (grad mode, inference mode, a functorch transform,
    a dispatch mode such as FakeTensorMode)."""
    result: list = []

    def run():
        try:
            result.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            result.append((False, exc))

    thread = threading.Thread(target=run, name="tilejit-probe", daemon=True)
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value
