"""A training step of a small MLP built from tilejit kernels, against the same MLP in
torch: eager and under ``torch.compile``, time per step.

    python tests/bench_mlp.py [--steps 300] [--repeats 5]

Not a test: it prints figures for notes. The tilejit model's layers are kernels with
their backwards registered (``register_autograd``): a linear layer (its backward through
torch's matmuls), ReLU and leaky ReLU (their backwards tilejit kernels too); the torch
model is ``torch.nn.functional``'s. Both train on the same data with SGD; their losses
are checked to agree before anything is timed. Small sizes on purpose: a step of a model
this size is mostly host overhead, which is what the figures compare.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

import tilejit
from tilejit import T

LINEAR = """
void linear(const float *X, const float *W, const float *b, float *Y, int64_t m, int64_t k,
            int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = b[j];
      for (int64_t p = 0; p < k; ++p) acc += X[i * k + p] * W[j * k + p];
      Y[i * n + j] = acc;
    }
}
"""
ACTIVATION = """
void %(name)s(const float *X, float *Y, float slope, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] > 0.0f ? X[i] : slope * X[i];
}
"""
ACTIVATION_BACKWARD = """
void %(name)s(const float *G, const float *X, float *DX, float slope, int64_t n) {
  for (int64_t i = 0; i < n; ++i) DX[i] = X[i] > 0.0f ? G[i] : slope * G[i];
}
"""


def kernels():
    m, k, n, size = T.symbol("m"), T.symbol("k"), T.symbol("n"), T.symbol("size")
    const = {"const": True}
    linear = tilejit.compile(tilejit.Program("linear", [
        T.Buffer((m, k), "float32", name="X", **const), T.Buffer((n, k), "float32", name="W", **const),
        T.Buffer((n,), "float32", name="b", **const), T.Buffer((m, n), "float32", name="Y")],
        LINEAR), out_idx=-1)
    activation = tilejit.compile(tilejit.Program("leaky_relu", [
        T.Buffer((size,), "float32", name="X", **const), T.Buffer((size,), "float32", name="Y"),
        T.Scalar("float32", name="slope")], ACTIVATION % {"name": "leaky_relu"}), out_idx=1)
    backward = tilejit.compile(tilejit.Program("leaky_relu_backward", [
        T.Buffer((size,), "float32", name="G", **const),
        T.Buffer((size,), "float32", name="X", **const),
        T.Buffer((size,), "float32", name="DX"), T.Scalar("float32", name="slope")],
        ACTIVATION_BACKWARD % {"name": "leaky_relu_backward"}), out_idx=2)

    def linear_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])

    def linear_backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x, grad.sum(0)

    linear.register_autograd(linear_backward, setup_context=linear_setup)

    def activation_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.slope = inputs[1]

    def activation_backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return backward(grad.contiguous(), x, ctx.slope), None

    activation.register_autograd(activation_backward, setup_context=activation_setup)
    return linear, activation


def models(sizes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        params.append((torch.randn(fan_out, fan_in, generator=generator) / fan_in ** 0.5)
                      .requires_grad_())
        params.append(torch.zeros(fan_out).requires_grad_())
    return params


def forward_tilejit(linear, activation, params, x):
    h = x
    for layer in range(len(params) // 2):
        w, b = params[2 * layer], params[2 * layer + 1]
        h = linear(h, w, b)
        if layer < len(params) // 2 - 1:
            flat = activation(h.reshape(-1), 0.0 if layer % 2 == 0 else 0.01)
            h = flat.reshape(h.shape)
    return h


def forward_torch(params, x):
    h = x
    for layer in range(len(params) // 2):
        w, b = params[2 * layer], params[2 * layer + 1]
        h = torch.nn.functional.linear(h, w, b)
        if layer < len(params) // 2 - 1:
            h = torch.nn.functional.leaky_relu(h, 0.0 if layer % 2 == 0 else 0.01)
    return h


def step_fn(forward, params, lr=0.05):
    def step(x, y):
        loss = torch.nn.functional.mse_loss(forward(x), y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
        return loss.detach()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    sizes = [16, 32, 32, 32, 4]
    x, y = torch.randn(8, sizes[0]), torch.randn(8, sizes[-1])
    linear, activation = kernels()
    rows = {}
    for mode in ("eager", "compiled"):
        tj_params, torch_params = models(sizes), models(sizes)
        tj = functools.partial(forward_tilejit, linear, activation, tj_params)
        tr = functools.partial(forward_torch, torch_params)
        if mode == "compiled":
            tj, tr = torch.compile(tj), torch.compile(tr)
        steps = {"tilejit": step_fn(tj, tj_params), "torch": step_fn(tr, torch_params)}
        losses = {name: [float(step(x, y)) for _ in range(5)] for name, step in steps.items()}
        assert all(abs(a - b) < 1e-4 for a, b in zip(losses["tilejit"], losses["torch"])), losses
        times = {name: [] for name in steps}
        for _ in range(args.repeats):
            for name, step in steps.items():
                start = time.perf_counter()
                for _ in range(args.steps):
                    step(x, y)
                times[name].append((time.perf_counter() - start) / args.steps * 1e6)
        for name in steps:
            rows[(mode, name)] = (statistics.median(times[name]), min(times[name]))
    print(f"MLP {sizes}, batch {x.shape[0]}, {args.repeats} repeats × {args.steps} steps "
          f"(torch {torch.__version__}, tilejit {tilejit.__version__})\n")
    print("| step | tilejit median / min µs | torch median / min µs | tilejit / torch |")
    print("|---|---:|---:|---:|")
    for mode in ("eager", "compiled"):
        (tm, tb), (rm, rb) = rows[(mode, "tilejit")], rows[(mode, "torch")]
        print(f"| {mode} | {tm:.0f} / {tb:.0f} | {rm:.0f} / {rb:.0f} | {tm / rm:.2f}× |")


if __name__ == "__main__":
    main()
