"""The ``ctypes`` backend: the core's shared library, loaded with ctypes, and no compiled
wrapper (only the core, built with the C compiler), so it works where Cython is
unavailable; ``execution_backend="auto"`` falls back to it.

A call is one call of a builtin function that CPython calls directly, made here with
``PyCFunction_NewEx`` over the core's ``tj_host_method`` (``tilejit.runtime.binding``):
no argument conversion, no libffi. From there the call is the one every backend makes
(``tj_host_call``), so results, exception types and messages are those of the others.
"""

from __future__ import annotations

from . import binding


class CtypesKernel:
    """Mixin giving ``JITKernel`` a ctypes ``__call__`` (see ``tilejit.runtime.backends``)."""

    _entry = None

    def _attach_plan(self, plan):
        self._plan = plan
        self._entry = binding.entry(plan)

    def __call__(self, /, *args, **keywords):
        return self._entry(*args, **keywords)
