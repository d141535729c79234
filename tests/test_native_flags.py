"""``-march=native`` (``-mcpu=``, ``-mtune=``) keyed by what the compiler resolves it to:
GCC's ``-Q --help=target``, clang's ``-###``; a compiler that says neither keeps such a
kernel local (never shared)."""

from __future__ import annotations

import shutil

import pytest

from tilejit.builder import compiler


def test_flags_without_native_resolve_to_nothing():
    assert compiler.native_resolution(["cc"], ["-O3", "-march=x86-64"]) is None
    assert compiler.native_flags(["-O2", "-march=native", "-mtune=native", "-mavx"]) == (
        "-march=native", "-mtune=native")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_gcc_says_which_cpu_native_is():
    first = compiler.native_resolution(["gcc"], ["-O3", "-march=native"])
    assert first.startswith("gcc -march=") and " sha256:" in first
    assert compiler.native_resolution(["gcc"], ["-march=native", "-O3"]) == first
    assert compiler.native_resolution(["gcc"], ["-mtune=native"]) != first


@pytest.mark.skipif(shutil.which("clang") is None, reason="no clang")
def test_clang_says_which_cpu_native_is():
    said = compiler.native_resolution(["clang"], ["-march=native"])
    assert said.startswith("clang -target-cpu ") and " sha256:" in said


def test_a_compiler_that_says_nothing_leaves_it_unresolved(tmp_path):
    quiet = tmp_path / "quiet-cc"
    quiet.write_text("#!/bin/sh\nexit 0\n")
    quiet.chmod(0o755)
    assert compiler.native_resolution([str(quiet)], ["-march=native"]) == "unresolved"
