"""A compiled kernel's artifact: what the builder made, as one frozen record.

The builder makes an ``Artifact`` when it compiles a kernel, finds it in the cache or
opens an export; a ``JITKernel`` holds one (``kernel.artifact``) and runs it. What is
written from a kernel (its export, its torch op's schema, its XLA target) is read from
the artifact, never from the kernel object, and the content key that names the kernel's
op in every process is computed here, once per artifact.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os

from ..language.program import Program
from ..native._build import disk_cache
from .cache import artifact_key
from .signature import Signature, lower


@dataclasses.dataclass(frozen=True, eq=False)
class Artifact:
    """A compiled kernel, as the builder made or opened it.

    - ``program``, ``signature``: the kernel as declared and as lowered;
    - ``library``: the image the core loads (for a prebuilt CPU library, its glue);
    - ``prebuilt``: the prebuilt CPU library the glue calls, or None;
    - ``host_source``: the file tilejit compiled ("" for a loaded or prebuilt image);
    - ``digests``: the SHA-256 of ``library`` (and ``prebuilt``) as the kernel loaded them,
      kept since the cache may remove the files later while the kernel runs;
    - ``images``: their verified bytes, in the same order, where kept (an export's, as
      the core checked them; a compiled kernel's under a cache size bound), else None;
    - ``exported``: opened from an export (its core kernel is reopened from ``images``);
    - ``cuda_arch``: the architecture(s) a CUDA image was built for, or None.
    """

    program: Program
    signature: Signature
    library: str
    host_source: str = ""
    prebuilt: str | None = None
    digests: tuple = ()
    images: tuple | None = None
    exported: bool = False
    cuda_arch: str | None = None

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def target(self) -> str:
        return self.signature.target

    @property
    def params(self) -> list:
        return self.program.params

    @functools.cached_property
    def key(self) -> str:
        """The content key: the signature (prototype, lowered spec, out_idx), the target
        and the images' bytes (their digests). Equal kernels share it in every process,
        different ones never do; the execution backend is not part of it."""
        sig = self.signature
        return artifact_key(kind="torch_op", name=sig.name, prototype=sig.c_prototype,
                            spec=sig.spec, out_idx=sig.out_idx, target=sig.target,
                            binaries=list(self.digests))

    @functools.cached_property
    def op_name(self) -> str:
        """``<kernel name>_<16 hex digits of the content key>``: the name of the kernel's
        torch op, in every process that has the kernel."""
        return f"{self.signature.name}_{self.key[:16]}"

    @functools.cached_property
    def jax_target(self) -> str:
        """The kernel's XLA FFI target, ``tilejit_<op name>``."""
        return f"tilejit_{self.op_name}"

    @property
    def roles(self) -> tuple:
        """The images' roles in an export, in ``digests`` order."""
        return ("glue", "library") if self.prebuilt is not None else ("image",)

    def outputs_passed(self) -> Artifact:
        """The same images with every output passed, not allocated (no ``out_idx``)."""
        return dataclasses.replace(self, signature=lower(self.program, None, self.target))


def built(program: Program, signature: Signature, library: str, host_source: str = "",
          prebuilt: str | None = None, cuda_arch: str | None = None) -> Artifact:
    """The artifact of a kernel compiled (or found in the cache) into ``library``: the
    images' digests as they are now, and under a cache size bound their verified bytes
    too, since this process's later writes may evict the files."""
    paths = [p for p in (library, prebuilt) if p]
    digests = tuple(disk_cache.known_sha256(p) or (
        disk_cache.sha256_file(p) if os.path.exists(p) else None) for p in paths)
    images = _read_verified(paths, digests) if disk_cache.max_size() is not None else None
    return Artifact(program, signature, library, host_source, prebuilt, digests, images,
                    False, cuda_arch)


def _read_verified(paths: list, digests: tuple) -> tuple | None:
    """The bytes of each of ``paths`` when they have the SHA-256 in ``digests``; None when
    one cannot be read or differs (an export then reads the files)."""
    kept = []
    for path, want in zip(paths, digests):
        try:
            with open(path, "rb") as image:
                data = image.read()
        except OSError:
            return None
        if want is None or hashlib.sha256(data).hexdigest() != want:
            return None
        kept.append(data)
    return tuple(kept)
