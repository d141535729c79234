"""Where torch keeps the conjugate and negative bits of a tensor, found once per process.

A conjugate view (``x.conj()`` of a complex tensor) and a negative view
(``x.conj().imag``, ``torch._neg_view(x)``) share their source's memory and only mark, in
torch's dispatch key set, that their values are its conjugates or negatives. DLPack cannot
say so: the exchange API exports both as plain tensors, ``__dlpack__`` refuses only the
conjugate ones. The core refuses them before import (``tj_producer.view``), so the bits
must be read at every call, for every torch tensor.

``Tensor.is_conj()`` and ``Tensor.is_neg()`` cost about 100 ns each (they release the GIL
and go through the dispatcher): more than the rest of a whole kernel call. The bits
themselves are one 64-bit word of the tensor's ``TensorImpl``, which a ``torch.Tensor``
object points to. ``locate`` finds that word once: the word in which a tensor's
``TensorImpl`` differs from its conjugate's by one bit and from its negative's by another,
read through ``/proc/self/mem`` (an address that is not mapped fails there instead of
crashing the process). The location is then checked against ``is_conj()``/``is_neg()`` on
tensors of every kind. When anything does not match (another torch release, another
platform), there is no location and the bindings ask torch through ``lazy_view``:
correct, only slower.

>>> locate()  # (object offset of the TensorImpl pointer, word offset, conj mask, neg mask)
(16, 168, 2147483648, 4294967296)
"""

from __future__ import annotations

import os
import struct
import threading

from ...native import abi
from ...runtime.fast_paths import decided as _decided
from ...runtime.fast_paths import in_fresh_thread

__all__ = ["CONJUGATE", "NEGATIVE", "lazy_view", "locate"]

CONJUGATE, NEGATIVE = abi.TJ_VIEW_CONJUGATE, abi.TJ_VIEW_NEGATIVE
# How far into a TensorImpl the bits are looked for (torch 2.x keeps them near byte 170).
_SPAN = 512

_lock = threading.Lock()
_located: list = []  # [location or None], once decided


def lazy_view(tensor) -> int:
    """The ``TJ_VIEW_*`` bits of a torch tensor, asked of torch (the slow way)."""
    return (CONJUGATE if tensor.is_conj() else 0) | (NEGATIVE if tensor.is_neg() else 0)


def locate() -> tuple[int, int, int, int] | None:
    """``(block_offset, word_offset, conjugate_mask, negative_mask)`` as ``tj_view_bits``
    takes them, verified for this process's torch; None when they cannot be found."""
    if not _located:
        with _lock:
            if not _located:

                try:  # on a thread of its own: the caller's torch modes do not apply
                    found = in_fresh_thread(_find)
                    why = ("found and checked on tensors of every kind" if found else
                           "not found, or not matching is_conj()/is_neg()")
                except Exception as exc:  # noqa: BLE001 - anything unexpected means: ask torch
                    found, why = None, f"{type(exc).__name__}: {exc}"
                _decided("lazy-view bits (TensorImpl)", found is not None, why)
                _located.append(found)
    return _located[0]


class _Memory:
    """This process's memory, read without the risk of a fault."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)

    def words(self, address: int, size: int) -> tuple[int, ...] | None:
        try:
            raw = os.pread(self.fd, size, address)
        except OSError:
            return None
        return struct.unpack(f"={len(raw) // 8}Q", raw[: len(raw) // 8 * 8])

    def close(self) -> None:
        os.close(self.fd)


def _samples(torch) -> list:
    """Tensors of every kind the bits must be right for."""

    class Sub(torch.Tensor):
        pass

    z = torch.zeros(4, 3, dtype=torch.complex64)
    y = torch.zeros(4, 3)
    return [y, z, y[1:, ::2], y.t(), z.conj(), z.conj().imag, z.conj().real, z.conj().conj(),
            torch._neg_view(y), torch._neg_view(z.conj()), torch._neg_view(y)[2:],
            torch.zeros(()), torch.zeros(0, 5), torch.zeros(2, dtype=torch.int32),
            torch.zeros(2, dtype=torch.bool), torch.zeros(2, 3, 4, 5, 6, 7),
            torch.zeros(1, 3, 4, 4).to(memory_format=torch.channels_last),
            torch.zeros(3, requires_grad=True), torch.nn.Parameter(torch.zeros(3)),
            y.as_subclass(Sub), z.conj().as_subclass(Sub)]


def _find() -> tuple[int, int, int, int] | None:
    import torch

    memory = _Memory()
    try:
        samples = _samples(torch)
        block_offset = impl_offset(torch, memory, samples)
        if block_offset is None:
            return None
        # The word of the key set: one bit apart between a tensor and its conjugate, another
        # between a tensor and its negative. Two heap pointers can differ by one bit too,
        # by chance of where the tensors were allocated: only the word that does so for
        # every one of several fresh pairs is the key set.
        candidates, kept = None, []
        for _ in range(_PAIRS):
            found = _key_set_candidates(torch, memory, kept)
            if found is None:
                return None
            candidates = found if candidates is None else candidates & found
        if len(candidates) != 1:
            return None
        ((word_offset, c, n),) = candidates
        # Checked on every kind of tensor, against torch's own answer.
        for tensor in samples:
            words = memory.words(tensor._cdata + word_offset, 8)
            if words is None:
                return None
            bits = (CONJUGATE if words[0] & c else 0) | (NEGATIVE if words[0] & n else 0)
            if bits != lazy_view(tensor):
                return None
        return block_offset, word_offset, c, n
    finally:
        memory.close()


def impl_offset(torch, memory: _Memory, samples: list) -> int | None:
    """Where a ``torch.Tensor`` object keeps its ``TensorImpl *``: the one word of every
    object of ``samples`` equal to its ``_cdata`` (the TensorImpl's address), at the same
    offset for every kind of tensor; None when there is not exactly one such word. torch
    2.9 keeps it in a ``c10::MaybeOwned<at::Tensor>`` (a flag, then the pointer: byte
    24), later releases in a plain ``at::Tensor`` (byte 16)."""
    size = torch.Tensor.__basicsize__
    found_in_all = None
    for tensor in samples:
        words = memory.words(id(tensor), size)
        if words is None:
            return None
        found = {8 * i for i, word in enumerate(words) if i >= 2 and word == tensor._cdata}
        found_in_all = found if found_in_all is None else found_in_all & found
    if found_in_all is None or len(found_in_all) != 1:
        return None
    return next(iter(found_in_all))


_PAIRS = 4  # fresh tensor pairs the key set's word must be found in


def _key_set_candidates(torch, memory, kept: list) -> set | None:
    """``{(offset, conjugate bit, negative bit)}`` of the TensorImpl words one bit apart
    between a fresh complex tensor and its conjugate and another between a fresh real
    tensor and its negative (the tensors are kept in ``kept``, so that the next pair is
    allocated elsewhere); None when a TensorImpl cannot be read."""
    z, y = torch.zeros(2, dtype=torch.complex64), torch.zeros(2)
    tensors = (z, z.conj(), y, torch._neg_view(y))
    kept.extend(tensors)
    impls = [memory.words(t._cdata, _SPAN) for t in tensors]
    if any(words is None for words in impls):
        return None
    plain_z, conj, plain_y, neg = impls
    found = set()
    for i in range(min(map(len, impls))):
        c, n = plain_z[i] ^ conj[i], plain_y[i] ^ neg[i]
        if (_one_bit(c) and _one_bit(n) and c != n and conj[i] & c and neg[i] & n
                and not (plain_z[i] | plain_y[i]) & (c | n)):
            found.add((8 * i, c, n))
    return found


def _one_bit(value: int) -> bool:
    return value != 0 and value & (value - 1) == 0
