"""Bound launches: ``kernel.bind(*args)`` binds a call once and launches it again and
again (``tj_bound``, core/src/call.c), for every backend: the core's host layer makes it
(``tj_host_bind_method``) and launches it (``tj_host_bound_method``)."""

from __future__ import annotations

import functools

from . import binding


class BoundLaunch(functools.partial):
    """A call of a kernel bound once: ``h = kernel.bind(a, b)`` validates the arguments,
    binds the symbols, allocates the ``out_idx`` outputs and packs the launch; ``h()``
    launches it again with the same arguments into the same outputs and returns them
    (``h.outputs``). ``h(stream=s)`` launches on ``s``; without ``stream=`` the
    producer's current stream is read at every launch (never kept), so a handle made
    outside ``torch.cuda.graph`` launches on the capture stream inside it.
    ``h.update(B=b2)`` swaps a tensor argument for another of the same dtype, shape and
    strides on the same device (checked, with alignment; a ``ValueError`` naming the
    kernel and the argument otherwise).

    The handle is a C callable: a ``functools.partial`` (C's call slot, and from
    CPython 3.12 its vectorcall) of the core's launch builtin (``tj_host_bound_method``),
    so ``h()`` runs no Python frame between the caller and the launch.

    >>> h = kernel.bind(a, b)       # C allocated once
    >>> c = h()                     # the same C, computed again
    >>> h.update(A=a2)()            # with another A
    """

    __slots__ = ("_bound", "_update", "kernel", "outputs")

    def __new__(cls, kernel, entry, args: tuple):
        address, outputs = entry(*args)
        launch, update = binding.bound_entries(address)
        self = super().__new__(cls, launch)
        self.kernel, self.outputs, self._update = kernel, outputs, update
        # What each input is bound to now, for update's undo (left-out inputs: None).
        self._bound = [*args] + [None] * (len(kernel._core_kernel.input_names) - len(args))
        return self

    def __init__(self, kernel, entry, args: tuple):
        pass  # made in __new__ (functools.partial's own construction)

    def update(self, /, **tensors) -> BoundLaunch:
        """Swaps tensor arguments, given by their input names; returns the handle. All or
        nothing: when one is refused, those swapped before it are swapped back."""
        names = self.kernel._core_kernel.input_names
        for name in tensors:
            if name not in names:
                raise TypeError(f"{self.kernel.name}: update() got an unexpected keyword "
                                f"argument '{name}' (inputs: {', '.join(names)})")
        done = []
        try:
            for name, tensor in tensors.items():
                index = names.index(name)
                self._update(index, tensor)
                done.append((index, self._bound[index]))
                self._bound[index] = tensor
        except BaseException:
            for index, previous in reversed(done):  # accepted before: accepted again
                self._update(index, previous)
                self._bound[index] = previous
            raise
        return self

    def __repr__(self) -> str:
        return f"<BoundLaunch of {self.kernel.name}>"

    def __reduce__(self):
        raise TypeError(f"{self.kernel.name}: a bound launch cannot be pickled (it holds "
                        "the tensors it launches on); bind again where it is needed")
