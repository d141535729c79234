"""@tilejit.autotune: the fastest config chosen, checked and timed; failures reported per
config; bad arguments refused before anything compiles; inputs made, given and restored;
the choice kept in the process, the disk cache (fresh processes) and the remote cache
(file:// and Redis), tuned once across threads and processes; `cache ls/clear`.

Compiles are counted by a compiler that logs its command lines; benchmark runs by
counting the tuner's runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
from autotune_kernels import CONFIGS, check, make, program
from conftest import compiler_runs as _compiles
from conftest import subprocess_env

import tilejit
from tilejit import T
from tilejit.builder import remote_cache
from tilejit.runtime import autotune as autotune_module

TESTS = Path(__file__).resolve().parent


def _name() -> str:
    return f"spin_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", autouse=True)
def module_cache(tmp_path_factory, logging_cc):
    """This module's own cache: its child processes compile with the logging compiler,
    whose path keys a core of its own, built here once (the session's cache keeps one
    core, which other modules count on). They run the ctypes backend, which needs no
    wrapper (every backend tunes alike; the wrapper's build would cost seconds)."""
    # This process's core and wrapper come from the session's cache, as in other modules.
    n = T.symbol("n")
    tilejit.compile(tilejit.Program("noop", [T.Buffer((n,), "float32", name="X")],
                                    "void noop(float *X, int64_t n) {}"))(np.ones(3, np.float32))
    tilejit.empty((1,))
    root = tmp_path_factory.mktemp("autotune-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEJIT_CACHE_DIR", str(root))
        patch.setenv("TILEJIT_EXECUTION_BACKEND", "ctypes")
        build_core = "from tilejit.native import library; library.core_library()"
        subprocess.run([sys.executable, "-c", build_core],
                       env=subprocess_env(TILEJIT_CC=str(logging_cc)), check=True,
                       capture_output=True, timeout=600)
        yield root


@pytest.fixture
def counted(cc_log, monkeypatch):
    """Compiles logged to ``counted.log``; ``counted.runs()`` the tuner's kernel runs."""
    runs = []
    original = autotune_module._Bench.run

    def run(self, kernel):
        runs.append(kernel.name)
        return original(self, kernel)

    monkeypatch.setattr(autotune_module._Bench, "run", run)

    class Counted:
        pass

    counted = Counted()
    counted.log, counted.runs = cc_log, lambda: len(runs)
    return counted


# ---- The choice -----------------------------------------------------------------------


def test_the_fastest_config_is_chosen_and_recorded(counted):
    name = _name()
    spin = make(name=name, warmup=2, rep=3)
    kernel = spin(8192)
    check(kernel, 8192)
    record = spin.tuning(8192)
    assert record.config is CONFIGS[1] and record.kernel is kernel
    assert record.from_cache  # the second ask is the process's
    assert [t.config for t in record.trials] == CONFIGS
    assert all(t.error is None and t.latency > 0 for t in record.trials)
    assert record.latency == record.trials[1].latency == min(t.latency for t in record.trials)
    assert record.trials[0].latency > 4 * record.trials[1].latency
    # ref check + warmup + rep per config, and nothing more on the second call
    assert counted.runs() == len(CONFIGS) * (1 + 2 + 3)
    assert _compiles(counted.log, name) == len(CONFIGS)
    assert spin(8192) is kernel
    assert spin.jit(8192, **record.config) is kernel
    assert counted.runs() == len(CONFIGS) * 6 and _compiles(counted.log, name) == 3


def test_a_callable_gives_the_configs_from_the_call():
    seen = []

    def configs(n):
        seen.append(n)
        return [{"reps": 8}, {"reps": 1}] if n > 100 else [{"reps": 2}]

    # Sizes where reps=1 is faster than the others by far more than a busy machine's
    # noise (tens of microseconds of work against a few).
    spin = make(configs=configs, name=_name())
    assert spin.tuning(8192).config == {"reps": 1}
    assert spin.tuning(64).config == {"reps": 2}
    assert seen == [8192, 64]
    # Any iterable of dicts: a generator, read once.
    spin = make(configs=({"reps": r} for r in (9, 1)), name=_name())
    assert spin.tuning(8192).config == {"reps": 1} and spin.tuning(4096).config == {"reps": 1}
    spin = make(configs=lambda n: ({"reps": r} for r in (1, 9)), name=_name())
    assert spin.tuning(8192).config == {"reps": 1}


def test_failing_configs_are_skipped_and_reported():
    name = _name()

    @tilejit.autotune(configs=[{"reps": 1, "bug": "syntax"}, {"reps": 1, "bug": "wrong"},
                               {"reps": 1, "bug": "raise"}, {"reps": 3, "bug": ""}],
                      ref_prog=lambda a: a * 2, warmup=0, rep=2)
    @tilejit.jit(out_idx=-1)
    def spin(n, reps=1, bug=""):
        if bug == "raise":
            raise RuntimeError("no program for this one")
        extra = {"syntax": "int oops(;\n", "wrong": "#define float_two 3.0f\n"}.get(bug, "")
        prog = program(n, reps, name, extra)
        if bug == "wrong":
            prog = program(n, reps, name, "").__class__(
                name=name, params=prog.params,
                source=prog.source.replace("A[i] * 2.0f", "A[i] * 3.0f"))
        return prog

    record = spin.tuning(256)
    assert record.config == {"reps": 3, "bug": ""}
    errors = [t.error for t in record.trials]
    assert errors[0].startswith("CompileError:") and "oops" in errors[0]
    assert errors[1].startswith("ValueError: output 0 differs from ref_prog beyond atol=0.01")
    assert errors[2] == "RuntimeError: no program for this one"
    assert errors[3] is None and record.trials[3].latency > 0
    assert [t.latency is None for t in record.trials] == [True, True, True, False]


def test_every_config_failing_raises_one_error_naming_each():
    spin = make(configs=[{"reps": 1}, {"reps": 2}], name=_name(),
                ref_prog=lambda a: a * 5)
    with pytest.raises(tilejit.AutotuneError) as info:
        spin(64)
    text = str(info.value)
    assert text.startswith(f"{spin.name}: autotune: every one of the 2 configs failed:")
    assert "configs[0] {'reps': 1}: ValueError: output 0 differs" in text
    assert "configs[1] {'reps': 2}: ValueError: output 0 differs" in text
    assert [t.config for t in info.value.trials] == [{"reps": 1}, {"reps": 2}]


# ---- Refusals, before anything compiles -------------------------------------------------


def _factory():
    @tilejit.jit(out_idx=-1)
    def spin(n, reps=4):
        return program(n, reps)

    return spin


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"configs": []}, ValueError, "spin: autotune: configs is empty"),
    ({"configs": None}, ValueError, "spin: autotune: configs is required"),
    ({"configs": {"reps": 1}}, TypeError, "spin: autotune: configs must be a list of dicts"),
    ({"configs": [{"reps": 1}, {"rep": 2}]}, TypeError,
     ("spin: autotune: configs[1] {'rep': 2} sets 'rep', which spin() does not take (its "
      "keyword arguments: n, reps)")),
    ({"configs": [7]}, TypeError, "spin: autotune: configs[0] must be a dict"),
    ({"configs": [{}], "warmup": -1}, ValueError,
     "spin: autotune: warmup must be an int >= 0, got -1"),
    ({"configs": [{}], "rep": -3}, ValueError, "spin: autotune: rep must be an int >= 1, got -3"),
    ({"configs": [{}], "rep": 0}, ValueError, "spin: autotune: rep must be an int >= 1, got 0"),
    ({"configs": [{}], "atol": -1}, ValueError, "spin: autotune: atol must be a number >= 0"),
    ({"configs": [{}], "executor": 3}, TypeError,
     "spin: autotune: executor must be a concurrent.futures.Executor"),
    ({"configs": [{}], "executor": "dask"}, ValueError, "spin: autotune: executor must be"),
    ({"configs": [{}], "framework": "jax"}, ValueError, "spin: autotune: framework must be"),
])
def test_bad_arguments_are_refused_in_the_functions_name(options, error, message):
    with pytest.raises(error) as info:
        tilejit.autotune(**options)(_factory())
    assert str(info.value).startswith(message), str(info.value)


def test_autotune_decorates_jit_factories_only():
    def plain(n, reps=1):
        return program(n, reps)

    with pytest.raises(TypeError, match=r"^plain: autotune decorates a @tilejit.jit factory, "
                       r"got function; stack @tilejit.autotune\(...\) above"):
        tilejit.autotune(configs=[{"reps": 1}])(plain)
    with pytest.raises(TypeError, match="autotune decorates a @tilejit.jit factory, got a "
                       r"jit\(layout=...\) function"):
        tilejit.autotune(configs=[{}])(tilejit.jit(layout="dynamic")(lambda A: None))
    with pytest.raises(TypeError, match=r"autotune needs its configs"):
        tilejit.autotune(_factory())


def test_calls_are_refused_before_compiling(counted):
    spin = make(configs=lambda n: [{"reps": 1}, {"nope": 1}], name=_name())
    with pytest.raises(TypeError, match=r"configs\[1\] \{'nope': 1\} sets 'nope', which "
                       r"spin\(\) does not take"):
        spin(64)
    spin = make(name=_name())
    with pytest.raises(TypeError, match="argument 'reps' is chosen by autotune"):
        spin(64, reps=3)
    with pytest.raises(TypeError, match="argument 'reps' is chosen by autotune"):
        spin(64, 3)
    with pytest.raises(TypeError, match=r"spin\(\): missing a required argument: 'n'"):
        spin()
    with pytest.raises(TypeError, match="argument 'n' of type list is unhashable"):
        spin([64])
    assert counted.log.read_text().count(".c ") == 0 and counted.runs() == 0


# ---- Inputs --------------------------------------------------------------------------------

INPLACE = r"""
void bump(float *X, int64_t n) { for (int64_t i = 0; i < n; ++i) X[i] += STEP; }
"""


def _bump(step_configs, name):
    n = T.symbol("n")

    @tilejit.autotune(configs=step_configs, warmup=2, rep=3,
                      ref_prog=lambda x: x + 1)
    @tilejit.jit()
    def bump(step=1):
        return tilejit.Program(name=name, source=f"#define STEP {step}\n" + INPLACE.replace(
            "bump", name), params=[T.Buffer((n,), "float32", name="X")])

    return bump


def test_symbolic_sizes_ask_for_inputs_and_given_inputs_are_restored():
    name = _name()
    bump = _bump([{"step": 1}, {"step": 2}], name)
    with pytest.raises(ValueError, match=r"^bump: autotune: parameter .X. has the symbolic size n "
                       r".*pass them with `with tilejit.autotune_inputs\(...\)`"):
        bump()
    x = np.arange(5, dtype=np.float32)
    with tilejit.autotune_inputs(x):
        record = bump.tuning()
    np.testing.assert_array_equal(x, np.arange(5, dtype=np.float32))  # unchanged
    assert record.config == {"step": 1}
    assert "differs from ref_prog" in record.trials[1].error
    # The choice is the arguments': outside the block, the same call takes it.
    assert bump() is record.kernel and bump.tuning().from_cache


def test_given_torch_inputs_are_restored_too():
    torch = pytest.importorskip("torch")
    bump = _bump([{"step": 1}], _name())
    x = torch.arange(6, dtype=torch.float32)
    with tilejit.autotune_inputs(x):
        assert bump.tuning().config == {"step": 1}
    assert torch.equal(x, torch.arange(6, dtype=torch.float32))


def test_made_up_inputs_follow_the_framework_asked_for():
    torch = pytest.importorskip("torch")
    seen = []

    def ref(a):
        seen.append(type(a))
        return a * 2

    make(name=_name(), ref_prog=ref, framework="torch")(32)
    make(name=_name(), ref_prog=ref)(32)
    assert seen == [torch.Tensor, np.ndarray]


def test_in_place_outputs_are_the_last_buffers_written():
    # Nothing declared const, no out_idx: ref_prog's one result is checked against C.
    name = _name()

    @tilejit.autotune(configs=[{"k": 2}, {"k": 3}], ref_prog=lambda a, b, c: a + 2 * b,
                      warmup=0, rep=2)
    @tilejit.jit()
    def axpy(k=2):
        return tilejit.Program(
            name=name, source=f"void {name}(float *A, float *B, float *C) "
            f"{{ for (int i = 0; i < 16; ++i) C[i] = A[i] + {k} * B[i]; }}",
            params=[T.Buffer((16,), "float32", name=x) for x in "ABC"])

    record = axpy.tuning()
    assert record.config == {"k": 2}
    assert record.trials[1].error.startswith("ValueError: output 0 differs from ref_prog")


@pytest.mark.parametrize("fullgraph", [True, False])
def test_a_call_under_torch_compile_is_the_tuned_kernels_op(fullgraph):
    torch = pytest.importorskip("torch")
    spin = make(name=_name(), ref_prog=lambda a: a * 2)

    @torch.compile(fullgraph=fullgraph)
    def model(x):
        return spin(x.shape[0])(x) + 1

    x = torch.arange(8192, dtype=torch.float32)
    assert torch.equal(model(x), x * 2 + 1)
    assert spin.tuning(8192).config == CONFIGS[1]


def test_jax_arrays_and_tensors_that_need_gradients_tune_as_given():
    torch = pytest.importorskip("torch")
    x = torch.ones(8192, requires_grad=True)
    with tilejit.autotune_inputs(x):
        assert make(name=_name()).tuning(8192).config == CONFIGS[1]
    assert x.grad is None and x.grad_fn is None
    jnp = pytest.importorskip("jax.numpy")
    with tilejit.autotune_inputs(jnp.arange(8192, dtype=jnp.float32)):
        assert make(name=_name()).tuning(8192).config == CONFIGS[1]


def test_wrong_given_inputs_are_named():
    spin = make(name=_name())
    with tilejit.autotune_inputs(np.ones(8, np.float32), np.ones(8, np.float32)), \
            pytest.raises(ValueError, match=r"autotune_inputs got 2 tensors; the "
                          r"kernel takes 1 inputs \(A\)"):
        spin(8)


# ---- Caching ----------------------------------------------------------------------------

_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from autotune_kernels import make, check
from tilejit.runtime import autotune
runs = []
original = autotune._Bench.run
autotune._Bench.run = lambda self, k: (runs.append(1), original(self, k))[1]
spin = make(name=sys.argv[2], extra=sys.argv[3] if len(sys.argv) > 3 else "")
record = spin.tuning(8192)
check(record.kernel, 8192)
print(json.dumps({"config": record.config, "from_cache": record.from_cache, "runs": len(runs),
                  "latency": record.latency, "errors": [t.error for t in record.trials]}))
"""


def _child(name: str, *extra: str, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(TESTS), name, *extra],
                          env=subprocess_env(**env), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_process_takes_the_choice_from_the_disk_cache(counted, tmp_path):
    name = _name()
    first = _child(name)
    assert first["config"] == {"reps": 1} and not first["from_cache"] and first["runs"] == 21
    compiled = _compiles(counted.log, name)
    assert compiled == 3
    second = _child(name)
    assert second == {**first, "from_cache": True, "runs": 0}
    assert _compiles(counted.log, name) == compiled  # the chosen kernel found, losers untouched
    # An edited kernel is tuned again.
    edited = _child(name, "/* edited */\n")
    assert not edited["from_cache"] and edited["runs"] == 21
    listed = json.loads(subprocess.run(
        [sys.executable, "-m", "tilejit", "cache", "ls", "--json"], env=subprocess_env(),
        capture_output=True, text=True, check=True).stdout)
    assert sum(e["kind"] == "tuning" and e["name"] == name for e in listed) == 2


def test_processes_tuning_at_once_tune_once(counted):
    name = _name()
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, str(TESTS), name],
                                 env=subprocess_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["from_cache"] for r in results) == [False, True]
    assert sorted(r["runs"] for r in results) == [0, 21]
    assert _compiles(counted.log, name) == 3


def test_threads_asking_at_once_tune_once(counted):
    spin = make(name=_name())
    kernels, barrier = [], threading.Barrier(4)

    def ask():
        barrier.wait()
        kernels.append(spin(1024))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(k) for k in kernels}) == 1 and counted.runs() == 21


def test_cache_clear_kind_tuning_leaves_kernels(counted):
    name = _name()
    _child(name)

    def listed():
        return json.loads(subprocess.run(
            [sys.executable, "-m", "tilejit", "cache", "ls", "--json", "--kind", "tuning"],
            env=subprocess_env(), capture_output=True, text=True, check=True).stdout)

    assert listed() and {e["kind"] for e in listed()} == {"tuning"}
    done = subprocess.run([sys.executable, "-m", "tilejit", "cache", "clear", "--kind",
                           "tuning"], env=subprocess_env(), capture_output=True, text=True,
                          check=True)
    assert "removed" in done.stdout and listed() == []
    again = _child(name)  # tuned again; its kernels are still cached
    assert not again["from_cache"] and _compiles(counted.log, name) == 3


@pytest.fixture
def machines(tmp_path, monkeypatch):
    """``machines(name)``: the environment of machine ``name``, with a local cache of its
    own, seeded with this session's core and wrapper (built per machine)."""
    import shutil

    session = Path(os.environ["TILEJIT_CACHE_DIR"])

    def machine(name: str, **env) -> dict:
        root = tmp_path / f"machine-{name}"
        if not root.exists():
            root.mkdir()
            for area in ("core", "wrapper"):
                if (session / area).is_dir():
                    shutil.copytree(session / area, root / area)
        return {"TILEJIT_CACHE_DIR": str(root), **env}

    return machine


def _shared_remote(remote: str, counted, machines) -> None:
    name = _name()
    a = _child(name, **machines("a", TILEJIT_REMOTE_CACHE=remote))
    assert not a["from_cache"]
    before = _compiles(counted.log, name)
    b = _child(name, **machines("b", TILEJIT_REMOTE_CACHE=remote))
    assert b == {**a, "from_cache": True, "runs": 0}
    assert _compiles(counted.log, name) == before  # neither timed nor compiled on b


def test_a_machine_takes_the_choice_and_the_kernel_from_a_shared_directory(
        counted, machines, tmp_path):
    shared = tmp_path / "remote"
    shared.mkdir()
    _shared_remote(f"file://{shared}", counted, machines)


def test_signed_entries_from_another_key_are_tuned_again(counted, machines, tmp_path):
    shared = tmp_path / "remote"
    shared.mkdir()
    name = _name()
    remote = {"TILEJIT_REMOTE_CACHE": f"file://{shared}"}
    _child(name, **machines("a", **remote, TILEJIT_REMOTE_CACHE_KEY="one"))
    b = _child(name, **machines("b", **remote, TILEJIT_REMOTE_CACHE_KEY="two"))
    assert not b["from_cache"] and b["runs"] == 21
    # b's own entry, signed with its key, replaced the one it refused.
    c = _child(name, **machines("c", **remote, TILEJIT_REMOTE_CACHE_KEY="two"))
    assert c["from_cache"] and c["runs"] == 0


def test_a_machine_takes_the_choice_from_redis(counted, machines, tmp_path):
    pytest.importorskip("redis", reason="the redis client is in the test extra")
    import shutil

    from test_remote_cache import RedisServer, _ci
    if shutil.which("redis-server") is None:
        if _ci():
            pytest.fail("redis-server is not installed; CI installs it (.ci/run)")
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisServer(tmp_path)
    server.start()
    try:
        _shared_remote(server.url, counted, machines)
        assert any(k.startswith(b"tilejit:kernel:") for k in server.client().scan_iter())
    finally:
        server.stop()
    remote_cache.reset()


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e5m2", "float16", "int8"])
def test_a_host_copy_widens_only_the_types_numpy_lacks(dtype):
    torch = pytest.importorskip("torch")
    from tilejit.runtime import autotune

    x = torch.arange(4).to(getattr(torch, dtype))
    copy = autotune._host(x)
    np.testing.assert_array_equal(copy, np.arange(4))
    assert copy.dtype == (np.float32 if dtype in ("bfloat16", "float8_e5m2") else dtype)
    x.copy_(torch.zeros(4).to(x.dtype))
    assert copy[3] == 3  # a copy: later writes to x do not reach it
