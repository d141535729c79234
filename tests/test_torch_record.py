"""One recording path: ``autograd.decide`` is the one answer to "record this call?", and
the C fast paths that answer it for themselves (the core's record gate,
``tj_host_plan.record`` in core/src/host.c, and the op's C autograd kernel's plain-call
check in core/src/torch.c) answer as it does on one table of cases, with the fast paths
on and with ``TILEJIT_FAST_PATHS=0`` (tests/test_fast_paths.py runs this file again).
The op's record (``tilejit/frameworks/torch/record.py``) is changed only through its
own methods."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import python_calls
from torch.autograd import forward_ad

import tilejit
from tilejit import T
from tilejit.frameworks.torch import autograd, native_op, op
from tilejit.frameworks.torch.record import OpRecord

PAIR = """
void {name}(const double *A, const double *B, double *C, int64_t n) {{
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] * B[i];
}}
"""


def _pair(name: str):
    n = T.symbol("n")
    return tilejit.compile(tilejit.Program(name, [
        T.Buffer((n,), "float64", name="A", const=True),
        T.Buffer((n,), "float64", name="B", const=True),
        T.Buffer((n,), "float64", name="C")], PAIR.format(name=name)), out_idx=-1)


@pytest.fixture(scope="module")
def kernels():
    pair, bare = _pair("pair"), _pair("pair_bare")
    pair.register_autograd(lambda ctx, g: (g, g))
    for kernel in (pair, bare):  # the first claims install the runners and the gate
        x = torch.ones(3, dtype=torch.float64, requires_grad=True)
        with contextlib.suppress(RuntimeError):
            kernel(x, x)
    return {"pair": pair, "bare": bare}


class Sub(torch.Tensor):
    pass


def _t(grad: bool = False, sub: bool = False):
    value = torch.ones(3, dtype=torch.float64)
    if sub:
        value = value.as_subclass(Sub)
    return value.requires_grad_(grad)


@contextlib.contextmanager
def _dual_level(tangent_on: int | None, args: list):
    with forward_ad.dual_level():
        if tangent_on is not None:
            args[tangent_on] = forward_ad.make_dual(args[tangent_on],
                                                    torch.ones(3, dtype=torch.float64))
        yield


# (id, kernel, args, stream, the context the call runs in, how: "both", "direct", "op")
CASES = [
    ("grad on, A requires grad", "pair", lambda: [_t(True), _t()], None, None, "both"),
    ("grad on, B requires grad", "pair", lambda: [_t(), _t(True)], None, None, "both"),
    ("grad on, both require grad", "pair", lambda: [_t(True), _t(True)], None, None, "both"),
    ("grad on, none requires grad", "pair", lambda: [_t(), _t()], None, None, "both"),
    ("grad off", "pair", lambda: [_t(True), _t()], None, torch.no_grad, "both"),
    ("inference mode", "pair", lambda: [_t(True), _t()], None, torch.inference_mode, "both"),
    ("a tensor subclass requires grad", "pair", lambda: [_t(True, sub=True), _t()], None, None,
     "both"),
    ("a tensor subclass, no grad", "pair", lambda: [_t(sub=True), _t()], None, None, "op"),
    ("a Parameter, no grad", "pair",
     lambda: [torch.nn.Parameter(_t(), requires_grad=False), _t()], None, None, "both"),
    ("a Parameter", "pair", lambda: [torch.nn.Parameter(_t()), _t()], None, None, "both"),
    ("forward-AD level open", "pair", lambda: [_t(True), _t()], None, "level", "both"),
    ("forward-AD level open, no grad", "pair", lambda: [_t(), _t()], None, "level", "both"),
    ("a tangent", "pair", lambda: [_t(), _t()], None, ("level", 0), "both"),
    ("no backward registered", "bare", lambda: [_t(True), _t()], None, None, "both"),
    ("no backward, no grad", "bare", lambda: [_t(), _t()], None, None, "both"),
    ("a stream given", "pair", lambda: [_t(True), _t()], 0, None, "direct"),
    ("one argument too few", "pair", lambda: [_t(True)], None, None, "direct"),
    ("one argument too many", "pair", lambda: [_t(True), _t(), _t()], None, None, "direct"),
    ("a float for a buffer", "pair", lambda: [_t(True), 2.0], None, None, "direct"),
    ("None for a buffer", "pair", lambda: [_t(True), None], None, None, "direct"),
    ("inside torch.func.grad", "pair", lambda: [_t(), _t()], None, "grad", "both"),
    ("inside torch.func.vmap", "pair", lambda: [_t(), _t()], None, "vmap", "both"),
]

_REFUSALS = {autograd.STREAM: (ValueError, "stream= cannot be given"),
             autograd.TANGENT: (RuntimeError, "forward-mode AD tangent"),
             autograd.NO_BACKWARD: (RuntimeError, "no backward is registered")}


def _run_in(context, args: list, body):
    """``body(args)`` inside the case's context (a transform hands it its wrappers)."""
    if context is None:
        return body(args)
    if context == "level" or isinstance(context, tuple):
        with _dual_level(context[1] if isinstance(context, tuple) else None, args):
            return body(args)
    if context == "grad":
        seen = []

        def inside(a):
            seen.append(body([a, *args[1:]]))
            return a.sum()

        torch.func.grad(inside)(args[0])
        return seen[0]
    if context == "vmap":
        seen = []
        torch.func.vmap(lambda a: seen.append(body([a, *args[1:]])) or a)(
            torch.ones(2, 3, dtype=torch.float64))
        return seen[0]
    with context():
        return body(args)


def _observe(kernels, name, make, stream, context, through):
    """``(verdict, outcome, frames)`` of one call: ``decide``'s answer where the call is
    made, what came of it (recorded, not recorded, or the refusal raised) and the Python
    functions it ran."""
    kernel = kernels[name]
    kinds = autograd.schema_kinds(kernel)
    backward = op.has_backward(kernel)
    call = (kernel.torch_op if through == "op" else
            (lambda *a: kernel(*a, stream=stream)) if stream is not None else kernel)

    def body(args):
        verdict = autograd.decide(tuple(args), kinds, backward, stream, exact=True)
        result = []

        def run():
            try:
                out = call(*args)
                result.append("recorded" if getattr(out, "grad_fn", None) is not None
                              else "not recorded")
            except Exception as exc:  # noqa: BLE001 - compared with the verdict below
                result.append(exc)

        frames = [f"{module}:{function}" for _, module, function in python_calls(run)
                  if module.startswith(("tilejit.frameworks.torch.", "tilejit.runtime.kernel"))]
        return verdict, result[0], frames

    return _run_in(context, make(), body)


def _outcome_agrees(verdict: str, outcome) -> bool:
    if verdict in _REFUSALS:
        cls, words = _REFUSALS[verdict]
        return isinstance(outcome, cls) and words in str(outcome)
    if isinstance(outcome, Exception):  # the kernel's own refusal of the call
        return verdict in (autograd.NOT_RECORDED, *autograd.RECORDED) and not any(
            words in str(outcome) for _, words in _REFUSALS.values())
    if verdict in autograd.RECORDED:
        return outcome == "recorded"
    return outcome == "not recorded"


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_core_record_gate_decides_as_python(kernels, case):
    _, name, make, stream, context, how = case
    if how == "op":
        pytest.skip("a call of the op only")
    verdict, outcome, frames = _observe(kernels, name, make, stream, context, "direct")
    assert _outcome_agrees(verdict, outcome), (verdict, outcome)
    # The gate took the call: the op's Function ran with no runner of tilejit's before it.
    took = "tilejit.frameworks.torch.autograd:forward" in frames and not any(
        f.startswith(("tilejit.frameworks.torch.op:", "tilejit.runtime.kernel")) for f in frames)
    gate = autograd.apply_checked() and op.record(kernels[name].artifact.op_name).plain_apply
    assert took == (bool(gate) and verdict == autograd.RECORD), (verdict, frames)


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_ops_c_autograd_kernel_decides_as_python(kernels, case):
    _, name, make, stream, context, how = case
    if how == "direct":
        pytest.skip("a direct call only")
    verdict, outcome, frames = _observe(kernels, name, make, stream, context, "op")
    if verdict == autograd.RUN:
        assert outcome == "not recorded", outcome
    else:
        assert _outcome_agrees(verdict, outcome), (verdict, outcome)
    # The C autograd kernel ran the call itself: no Python autograd kernel of tilejit's.
    took = not any(f.startswith("tilejit.frameworks.torch.autograd:") for f in frames)
    # (Inference mode skips autograd kernels: the backend kernel runs the call, in C or not.)
    in_c = native_op.available() is None and native_op.autograd_in_c(False)
    skipped = context is torch.inference_mode
    assert took == ((in_c or skipped) and verdict == autograd.RUN), (verdict, frames)


def test_the_ops_record_is_changed_through_its_own_methods_only():
    # No module of the torch wing but record.py assigns a field of an OpRecord (its
    # slots' names are assigned on nothing there, through an attribute or setattr; the
    # rest of the package never sees a record).
    root = Path(tilejit.__file__).parent / "frameworks" / "torch"
    fields = set(OpRecord.__slots__)
    assigned = {}
    for path in sorted(root.rglob("*.py")):
        if path.name == "record.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("setattr", "delattr") and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant) and node.args[1].value in fields):
                assigned.setdefault(str(path.relative_to(root)), []).append(node.args[1].value)
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute) and sub.attr in fields:
                        assigned.setdefault(str(path.relative_to(root)), []).append(sub.attr)
    assert assigned == {}
    # The torch wing keeps nothing of its own in a kernel's __dict__ any more, nor lists
    # of its own beside the record.
    for path in root.glob("*.py"):
        text = path.read_text()
        assert '"_torch_' not in text, path.name
        assert "_kept" not in text and "_unlowered" not in text, path.name


def test_one_autograd_function_per_op(kernels):
    # Every recorded call of an op, through any path, is recorded by the op's one Function.
    pair = kernels["pair"]
    rec = op.record(pair.artifact.op_name)
    x = _t(True)
    made = [pair(x, _t()), pair.torch_op(x, _t()),
            pair(x.as_subclass(Sub), _t())]
    with forward_ad.dual_level():
        made.append(pair(x, _t()))
    assert {type(y.grad_fn) for y in made} == {rec.function._backward_cls}
    source = (Path(autograd.__file__)).read_text()
    assert source.count("(torch.autograd.Function,)") == 1


def test_the_ops_function_shows_its_setup_context_only_inside_transforms(kernels):
    # torch binds forward's signature (inspect) at every apply of a Function with a
    # setup_context (from 2.14 in the C apply itself): outside functorch's transforms the
    # op's Function takes ctx in its forward, inside them it has its setup_context apart,
    # as torch.func requires; calls and gradients are the same either way.
    pair = kernels["pair"]
    pair.register_autograd(lambda ctx, g: (g * ctx.b, g * ctx.a),
                           setup_context=lambda ctx, inputs, out: (
                               setattr(ctx, "a", inputs[0]), setattr(ctx, "b", inputs[1])))
    try:
        function = op.record(pair.artifact.op_name).function
        assert function.setup_context is torch.autograd.Function.setup_context
        seen = []

        def f(a):
            seen.append(function.setup_context)
            return pair(a, b).sum()

        a, b = torch.arange(3.0, dtype=torch.float64) + 1, torch.full((3,), 2.0, dtype=torch.float64)
        torch.testing.assert_close(torch.func.grad(f)(a), b)
        assert seen and seen[0] is not torch.autograd.Function.setup_context
        x = a.clone().requires_grad_()
        pair(x, b).sum().backward()
        torch.testing.assert_close(x.grad, b)
        assert autograd.apply_checked() == autograd.FAST_PATHS
    finally:
        pair.register_autograd(lambda ctx, g: (g, g))
