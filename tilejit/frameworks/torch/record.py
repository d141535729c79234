"""What the torch wing keeps of each op, in one place: one ``OpRecord`` per op name (a
kernel's content), shared by every kernel of that content, holding every per-kernel
cache of the wing. Its fields are changed only through its own methods
(``tests/test_torch_record.py`` holds that no other module assigns them); read them as
attributes.
"""

from __future__ import annotations

import operator
import threading
import weakref

from ...builder.torch_schema import inputs


class OpRecord:
    """Everything tilejit keeps of one torch op. Made by ``record``.

    - ``name``: the op's name (``Artifact.op_name``);
    - ``op``: its ``OpOverload``, once registered (``defined``);
    - ``backward``: ``(backward, setup_context)`` as registered, or None (``registered``);
    - ``function``: the op's one ``autograd.Function``, which records its calls
      (``recording``, with the ways in below);
    - ``apply``: ``apply(*args, route)``, how any recorded call reaches ``function``;
    - ``base_apply``: ``function``'s C apply (``apply`` for a caller that has made sure no
      functorch transform is active and no input is a functorch wrapper), with the fast
      paths; else None;
    - ``plain_apply``: the same C apply, ``plain_apply(*args)`` without a route, for a
      plain call (``autograd.RECORD``) of an op that writes no argument; else None;
    - ``keyless``: its autograd kernel without the dispatcher's keyset;
    - ``claimed``: ``run(kernel, args, stream)``, how a claimed call of its kernels runs
      (``claimed_by``); ``claiming``: the kernels whose call plans hand their claims over
      (a weak set: ``claims_handed``), taken again when a backward is registered;
    - ``schema_inputs``: ``(conversion, name)`` of each input (``schema_inputs``);
    - ``kept``: what its C kernels use, kept for the process's life (``keep``);
    - ``lowering``: whether its Inductor lowering waits to be installed (``offer_lowering``).
    """

    __slots__ = ("apply", "backward", "base_apply", "claimed", "claiming", "function", "kept",
                 "keyless", "lowering", "name", "op", "plain_apply", "schema_inputs")

    def __init__(self, name: str) -> None:
        self.name = name
        self.op = self.backward = self.function = self.apply = None
        self.base_apply = self.plain_apply = self.keyless = self.claimed = None
        self.schema_inputs = None
        self.lowering = False
        self.claiming = weakref.WeakSet()
        self.kept = []

    def defined(self, op) -> None:
        """The op is registered: ``op`` is its ``OpOverload``."""
        self.op = op

    def registered(self, backward, setup_context) -> None:
        """``kernel.register_autograd``'s backward (again: it replaces the last one)."""
        self.backward = (backward, setup_context)

    def recording(self, function, apply, base_apply, plain_apply, keyless) -> None:
        """How calls are recorded: the op's Function and the ways calls reach it."""
        self.function, self.apply, self.keyless = function, apply, keyless
        self.base_apply, self.plain_apply = base_apply, plain_apply

    def claimed_by(self, run):
        """``run`` takes the op's claimed calls, unless a runner does already: the one."""
        with _lock:
            if self.claimed is None:
                self.claimed = run
            return self.claimed

    def claims_handed(self, kernel) -> None:
        """``kernel``'s call plan hands its claims to a runner of this op."""
        self.claiming.add(kernel)

    def schema_inputs_made(self, found: tuple) -> tuple:
        """``found`` kept as the op's schema inputs, unless some are: those."""
        with _lock:
            if self.schema_inputs is None:
                self.schema_inputs = found
            return self.schema_inputs

    def keep(self, value) -> None:
        """``value`` lives as long as the process (a C kernel of the op reads it)."""
        self.kept.append(value)

    def offer_lowering(self) -> None:
        """The op's Inductor lowering waits for Inductor to be loaded."""
        with _lock:
            self.lowering = True
            _lowerings.add(self)

    def take_lowering(self) -> bool:
        """Whether the op's lowering waited (it no longer does)."""
        with _lock:
            waited, self.lowering = self.lowering, False
            _lowerings.discard(self)
            return waited


_lock = threading.RLock()
_records: dict[str, OpRecord] = {}  # op name -> its record
_lowerings: set = set()  # the records whose lowering waits (OpRecord.offer_lowering)


def record(name: str) -> OpRecord:
    """The record of the op ``name``, made on first use."""
    found = _records.get(name)
    return found if found is not None else _records.setdefault(name, OpRecord(name))


def existing(name: str) -> OpRecord | None:
    """The record of the op ``name``, or None before anything was kept of it."""
    return _records.get(name)


def waiting_lowerings() -> list:
    """The records whose Inductor lowering waits, oldest last (empty: nothing to do)."""
    return list(_lowerings) if _lowerings else []


_CONVERSIONS = {"T": None, "t": None, "b": bool, "f": float, "i": operator.index}


def schema_inputs(kernel) -> tuple:
    """``(conversion, name)`` of each input of ``kernel`` in call order: None for a
    buffer, else how a scalar becomes the op schema's Python type (``op._schema_args``).
    Made once per op."""
    rec = record(kernel.artifact.op_name)
    found = rec.schema_inputs
    if found is None:
        found = rec.schema_inputs_made(tuple((_CONVERSIONS[kind], name)
                                             for _, name, kind in inputs(kernel.artifact)))
    return found
