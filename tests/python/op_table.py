"""The op table: one row per built-in op (kjit.ops.<name>, torch.ops.kjit.<name>), PyTorch's OpInfo idea.

A row (OpSpec) holds what the generic tests need to know of an op, once:
  - build: one valid call from a tensor factory (Maker: meta tensors on the CPU, CUDA tensors on a GPU, and the
    bad-input variants: wrong dtype, empty, 2^29-row, non-contiguous, NaN / Inf), with its tensor arguments as
    messages name them (tensors, first) and the dtypes it takes (allowed: as its TypeError lists them);
  - ref: PyTorch's result for the same arguments, and the tolerance (tol) and NaN / Inf behaviour (special);
  - samples: awkward calls (odd sizes, misaligned views, optional arguments left out) for each of
    `sample_dtypes`, built by a Factory on CUDA (opcheck, the GPU comparison) or on meta (compile-only plans).
The kernels an op compiles are never listed here: the generic compile test asks the op itself, through its
compile-only plan (kjit._C._plan_op, python/src/ops/runtime/plan.hpp), for each sample, dtype and target.

Generic tests iterate the table: ops/test_op_table.py (the registry, exports and docs; Meta; the kernels the
planners pick compile for sm_80 / sm_90 / sm_100; on a GPU: against the reference and torch.library.opcheck) and
test_bad_input.py (every bad-input category of every op). Deep tests of one family stay in its own file.
A new op adds one row here (test_every_registered_op_has_a_row fails without it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kjit import ops

A = torch.ops.aten
FLOAT_ALLOWED = r"allowed: torch\.float32, torch\.float16, torch\.bfloat16, torch\.float64"
U8_ALLOWED = r"allowed: torch\.uint8"
MATRIX_ALLOWED = r"allowed: torch\.bfloat16, torch\.float16, torch\.float32"
BF16 = torch.bfloat16
FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# The dtypes an op takes (its `allowed`), and those its samples run in on a GPU (opcheck, the comparison with
# PyTorch): float32 and bfloat16; the matrix ops float16 and bfloat16 (float32 is TF32, off by default).
DTYPES = {
    FLOAT_ALLOWED: FLOATING,
    MATRIX_ALLOWED: (torch.bfloat16, torch.float16, torch.float32),
    U8_ALLOWED: (torch.uint8,),
}
SAMPLE_DTYPES = {
    FLOAT_ALLOWED: (torch.float32, torch.bfloat16),
    MATRIX_ALLOWED: (torch.float16, torch.bfloat16),
    U8_ALLOWED: (torch.uint8,),
}


class Factory:
    """The tensors of an op's samples, of one dtype on one device: CUDA for opcheck and the GPU comparison,
    meta for compile-only plans (where `grad` is dropped: a plan runs the op's CUDA function itself)."""

    def __init__(self, device: str, dtype: torch.dtype, seed: int = 0):
        self.device, self.dtype = device, dtype
        self.gen = torch.Generator().manual_seed(seed)

    def _base(self, n, dtype, make):
        if self.device == "meta":
            return torch.empty(n, dtype=dtype, device="meta")
        return make(n).to(dtype).to(self.device)

    def t(self, *shape, dtype=None, grad=False, offset=0):
        """A tensor of `shape` (offset > 0: a misaligned view of a larger one)."""
        dtype = dtype or self.dtype
        base = self._base(math.prod(shape) + offset, dtype, lambda n: torch.randn(n, generator=self.gen))
        x = base[offset:].view(shape)
        if offset == 0:
            x = x.clone()
        return x.requires_grad_(grad and self.device != "meta")

    def decay(self, *shape, grad=False):
        """A tensor of values in [0.5, 1): a linear recurrence's decay that keeps it bounded."""
        x = self._base(math.prod(shape), self.dtype, lambda n: torch.rand(n, generator=self.gen) * 0.5 + 0.5)
        return x.view(shape).clone().requires_grad_(grad and self.device != "meta")

    def u8(self, *shape):
        """An image of random bytes."""
        x = self._base(math.prod(shape), torch.uint8, lambda n: torch.randint(0, 256, (n,), generator=self.gen))
        return x.view(shape)


# Samples shared by the ops of one family.
REDUCE_SAMPLES = lambda f: [  # noqa: E731
    ((f.t(7, 1000, grad=True),), {}),
    ((f.t(6, 33, 5, grad=True), 1, True), {}),
    ((f.t(4097), 0), {}),
]
SOFTMAX_SAMPLES = lambda f: [((f.t(7, 1000, grad=True),), {}), ((f.t(3, 5, 4097, grad=True), -1), {})]  # noqa: E731
LINEAR_SAMPLES = lambda f: [  # noqa: E731
    ((f.t(7, 72, grad=True), f.t(40, 72, grad=True), f.t(40, grad=True)), {"activation": "gelu", "scale": 0.5}),
    ((f.t(3, 5, 20, grad=True), f.t(24, 20, grad=True)), {"residual": f.t(3, 5, 24)}),
]
SWIGLU_SAMPLES = lambda f: [  # noqa: E731
    ((f.t(7, 72, grad=True), f.t(80, 72, grad=True)), {}),
    ((f.t(2, 3, 24, grad=True), f.t(48, 24, grad=True)), {"residual": f.t(2, 3, 24)}),
]

# Plan-only calls shared by the ops of one family.
# Rows in registers; split over a cluster (sm_90+) or streamed; the longest the norms hold; streamed (softmax).
LONG_ROWS = (4096, 50257, 131072, 262145)
NORM_ROWS = LONG_ROWS[:3]  # the norms refuse rows past 131072 elements (issue 46 lifts that)
ACTIVATION_PLANS = lambda f: [((f.t(33, 64).mT,), {}, {}), ((f.t(1 << 20),), {}, {})]  # noqa: E731
REDUCE_PLANS = lambda f: [  # noqa: E731
    ((f.t(64, 50257), -1, False), {}, {}),
    ((f.t(4096, 4096), 0, False), {}, {}),
    ((f.t(8, 4096, 33), 1, True), {}, {}),
]
LONG_ROW_PLANS = lambda f: [((f.t(64, d),), {}, {}) for d in LONG_ROWS]  # noqa: E731


class Maker:
    """Builds an operator's arguments on one device.

    x(): a data tensor (lead replaces its first dim: 0 for empty inputs, 2^29 for huge meta inputs);
    w(): a parameter (never resized); u8(): an image. dtype replaces every dtype (bad-dtype rows);
    noncontig gives views of the same shapes that are not contiguous; special puts NaN / +Inf / -Inf into
    the first data tensor ("nan" only NaN)."""

    def __init__(self, device="meta", *, dtype=None, lead=None, noncontig=False, special=None, seed=0):
        self.device, self.dtype, self.lead, self.noncontig, self.special = device, dtype, lead, noncontig, special
        self.gen = torch.Generator().manual_seed(seed)
        self.n_data = 0

    def _make(self, shape, dtype, image=False):
        shape = list(shape)
        alloc = list(shape)
        if self.noncontig and shape:
            alloc[-1] *= 2
        if self.device == "meta":
            t = torch.empty(alloc, dtype=dtype, device="meta")
        elif image:
            t = torch.randint(0, 256, alloc, generator=self.gen, dtype=torch.uint8).to(dtype)
        else:
            t = torch.randn(alloc, generator=self.gen).to(dtype)
        if self.device not in ("meta", "cpu"):
            # Placed before slicing: .to() of a strided view gives a contiguous copy (preserve_format keeps
            # strides only for dense tensors), which made the "non-contiguous" GPU inputs contiguous.
            t = t.to(self.device)
        if self.noncontig and shape:
            t = t[..., ::2]
            assert not t.is_contiguous() or t.numel() <= 1, "the Maker must give a non-contiguous view"
        return t

    def _place(self, t):
        return t

    def x(self, *shape, dtype=torch.float32):
        if self.lead is not None:
            shape = (self.lead, *shape[1:])
        t = self._make(shape, self.dtype or dtype)
        self.n_data += 1
        if self.special and self.n_data == 1 and t.numel() >= 3 and t.is_floating_point():
            flat = t.view(-1) if t.is_contiguous() else None
            if flat is not None:
                flat[0] = float("nan")
                if self.special == "naninf":
                    flat[t.numel() // 2] = float("inf")
                    flat[-1] = float("-inf")
        return self._place(t)

    def w(self, *shape, dtype=torch.float32):
        return self._place(self._make(shape, self.dtype or dtype))

    def u8(self, *shape):
        if self.lead is not None:
            shape = (self.lead, *shape[1:])
        self.n_data += 1
        return self._place(self._make(shape, self.dtype or torch.uint8, image=True))


def _rms_ref(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def _norm_backward_ref(rms):
    def ref(grad, x, w, has_bias, eps):
        # No weight: dweight (and dbias) are empty tensors, as the op returns them.
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            wr = w.detach().requires_grad_(True) if w is not None else None
            br = torch.zeros_like(w).requires_grad_(True) if has_bias else None
            y = _rms_ref(xr, wr, eps) if rms else F.layer_norm(xr, xr.shape[-1:], wr, br, eps)
            wanted = [xr] + ([wr] if w is not None else []) + ([br] if has_bias else [])
            grads = list(torch.autograd.grad(y, wanted, grad))
        dx = grads.pop(0)
        dw = grads.pop(0) if w is not None else x.new_empty((0,))
        return dx, dw, grads.pop(0) if has_bias else x.new_empty((0,))

    return ref


def _add_norm_ref(rms):
    def ref(x, r, *rest):
        h = x + r
        if rms:
            w, eps = rest
            return _rms_ref(h, w, eps), h
        w, b, eps = rest
        return F.layer_norm(h, h.shape[-1:], w, b, eps), h

    return ref


def _add_norm_backward_ref(rms):
    def ref(grad, grad_h, h, w, has_bias, eps):
        dx, dw, db = _norm_backward_ref(rms)(grad, h, w, has_bias, eps)
        g = dx if grad_h is None else dx + grad_h
        return g, g.clone(), dw, db

    return ref


ACTIVATION_REFS = {
    None: lambda z: z,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}


def _linear_pre(x, w, b=None, act=None, scale=1.0, res=None):
    z = F.linear(x.float(), w.float()) * scale
    return z + b.float() if b is not None else z


def _linear_ref(x, w, b=None, act=None, scale=1.0, res=None):
    y = ACTIVATION_REFS[act](_linear_pre(x, w, b, act, scale))
    return (y + res.float() if res is not None else y).to(x.dtype)


def _linear_backward_ref(grad, x, w, pre, act, scale, has_bias):
    if pre is None:  # no activation: nothing to differentiate through
        dz = grad.float()
    else:
        with torch.enable_grad():
            z = pre.float().requires_grad_(True)
            (dz,) = torch.autograd.grad(ACTIVATION_REFS[act](z), [z], grad.float())
    db = dz.sum(0) if has_bias else x.new_empty((0,)).float()
    return (dz * scale @ w.float()).to(x.dtype), ((dz * scale).T @ x.float()).to(x.dtype), db.to(x.dtype)


def _swiglu_pre(x, w, res=None):
    return F.linear(x.float(), w.float())


def _swiglu_ref(x, w, res=None):
    g, u = _swiglu_pre(x, w).chunk(2, -1)
    y = F.silu(g) * u
    return (y + res.float() if res is not None else y).to(x.dtype)


def _swiglu_backward_ref(grad, x, w, pre):
    with torch.enable_grad():
        gu = pre.float().requires_grad_(True)
        g, u = gu.chunk(2, -1)
        (dgu,) = torch.autograd.grad(F.silu(g) * u, [gu], grad.float())
    dgu = dgu.to(x.dtype).float()
    return (dgu @ w.float()).to(x.dtype), (dgu.T @ x.float()).to(x.dtype)


def _pool_backward_ref(fn):
    def ref(grad, x, *args):
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            (dx,) = torch.autograd.grad(fn(xr, *args), [xr], grad)
        return dx

    return ref


def _conv_ref(transposed):
    """F.conv1d / F.conv_transpose1d in float32 for 16-bit inputs (then rounded), on the schema's arguments."""

    def ref(x, w, b=None, *ints):
        wide = x.dtype in (torch.float16, torch.bfloat16)
        xf, wf, bf = (t.float() if wide and t is not None else t for t in (x, w, b))
        y = (F.conv_transpose1d if transposed else F.conv1d)(xf, wf, bf, *ints)
        return y.to(x.dtype)

    return ref


def _conv_backward_ref(transposed):
    """(dx, dweight, dbias) of F.conv1d / F.conv_transpose1d by autograd in float32 (dbias [0] without a bias)."""

    def ref(grad, x, w, *rest):
        *ints, has_bias = rest
        with torch.enable_grad():
            xf = x.detach().float().requires_grad_()
            wf = w.detach().float().requires_grad_()
            y = (F.conv_transpose1d if transposed else F.conv1d)(xf, wf, None, *ints)
            if y.device.type == "meta":
                dx, dw = torch.empty_like(xf), torch.empty_like(wf)
            else:
                dx, dw = torch.autograd.grad(y, (xf, wf), grad.float())
        g = grad.float()
        db = g.sum((0, 2) if g.dim() == 3 else 1) if has_bias else g.new_empty(0)
        return dx.to(x.dtype), dw.to(x.dtype), db.to(x.dtype)

    return ref


def _ddpm_coefficients_ref(betas, step=1):
    """The diffusers DDPMScheduler's step coefficients (epsilon prediction, fixed_small variance), float64."""
    beta = betas.double()
    abar = torch.cumprod(1 - beta, 0)
    prev = torch.cat([torch.ones(min(step, len(beta)), dtype=beta.dtype, device=beta.device), abar[: len(beta) - step]])
    alpha_t = abar / prev
    beta_t = 1 - alpha_t
    sigma = ((1 - prev) / (1 - abar) * beta_t).clamp_min(1e-20).sqrt()
    sigma[:step] = 0
    rows = [1 / abar.sqrt(), (1 - abar).sqrt() / abar.sqrt(), prev.sqrt() * beta_t / (1 - abar)]
    rows += [alpha_t.sqrt() * (1 - prev) / (1 - abar), sigma]
    return torch.stack(rows, 1).float()


def _ddpm_step_ref(x, eps, noise, c, t, clip=True, clip_range=1.0):
    r, q, a, b, s = c[t].to(x.dtype)
    x0 = x * r - eps * q
    if clip:
        x0 = x0.clamp(-clip_range, clip_range)
    out = a * x0 + b * x
    return out + s * noise if noise is not None else out


def _causal_conv1d_ref(x, w, b, s, act):
    W = w.shape[-1]
    xp = torch.cat([s if s is not None else x.new_zeros((*x.shape[:-1], W - 1)), x], -1)
    y = F.conv1d(xp, w.reshape(w.shape[0], 1, W), b, groups=x.shape[-2])
    return F.silu(y) if act == "silu" else y, xp[..., xp.shape[-1] - (W - 1) :].clone()


def _causal_conv1d_backward_ref(grad, grad_final, x, w, b, s, act):
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in (x, w) + tuple(t for t in (b, s) if t is not None)]
        it = iter(leaves[2:])
        y, final = _causal_conv1d_ref(
            leaves[0], leaves[1], next(it) if b is not None else None, next(it) if s is not None else None, act
        )
        outs, grads = [y], [grad]
        if grad_final is not None:
            outs, grads = [y, final], [grad, grad_final]
        got = list(torch.autograd.grad(outs, leaves, grads, allow_unused=True))
    got = [g if g is not None else torch.zeros_like(t) for g, t in zip(got, leaves)]
    db = got[2] if b is not None else x.new_empty((0,))
    ds = got[-1] if s is not None else x.new_empty((0,))
    return got[0], got[1], db, ds


def _group_norm_ref(x, g, w=None, b=None, eps=1e-5, act=None, scale=None, shift=None, res=None):
    """F.group_norm, then the activation, FiLM ([B, C] terms broadcast over the dims after C) and residual."""
    y = F.group_norm(x, g, w, b, eps)
    y = {"silu": F.silu, "mish": F.mish}.get(act, lambda t: t)(y)
    per_bc = (*x.shape[:2], *([1] * (x.dim() - 2)))
    if scale is not None:
        y = y * scale.reshape(per_bc)
    if shift is not None:
        y = y + shift.reshape(per_bc)
    return y + res if res is not None else y


def _group_norm_stats(x, g, eps=1e-5):
    """The group statistics (mean, rstd) [B, G] group_norm_forward returns, in float32 (float64 for float64);
    zeros of x's dtype for a dtype the op refuses (the bad-dtype rows: x's error comes first)."""
    if not x.is_floating_point():
        return x.new_zeros((x.shape[0], g)), x.new_zeros((x.shape[0], g))
    xs = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    xs = xs.reshape(x.shape[0], g, math.prod(x.shape[1:]) // g)
    # Two passes, as the kernel: the mean of a group holding +Inf is +Inf (Welford's update, aten's, makes it NaN).
    mean = xs.mean(-1)
    var = (xs - mean.unsqueeze(-1)).square().mean(-1)
    return mean, (var + eps).rsqrt()


def _group_norm_forward_ref(x, g, w, b, eps, *rest):
    return (_group_norm_ref(x, g, w, b, eps, *rest), *_group_norm_stats(x, g, eps))


def _group_norm_backward_args(grad, x, g, *rest):
    """group_norm_backward's arguments with x's own statistics (eps 1e-5, as the reference's)."""
    return (grad, x, *_group_norm_stats(x, g), g, *rest)


def _group_norm_backward_ref(grad, x, mean, rstd, g, w=None, b=None, act=None, scale=None, has_shift=False):
    """By autograd through _group_norm_ref at x's statistics (mean and rstd are x's own in every row)."""
    with torch.enable_grad():
        xr, wr, br, sr = (t.detach().requires_grad_(True) if t is not None else None for t in (x, w, b, scale))
        hr = x.new_zeros(x.shape[:2]).requires_grad_(True) if has_shift else None
        y = _group_norm_ref(xr, g, wr, br, 1e-5, act, sr, hr)
        wanted = [t for t in (xr, wr, br, sr, hr) if t is not None]
        got = iter(torch.autograd.grad(y, wanted, grad))
    empty = x.new_empty((0,))
    dx = next(got)
    dw, db = (next(got) if t is not None else empty for t in (w, b))
    ds = next(got).reshape(x.shape[:2]) if scale is not None else empty
    return dx, dw, db, ds, next(got) if has_shift else empty


def _linear_scan_ref(a, b, h0=None):
    h = h0.to(a.dtype) if h0 is not None else a.new_zeros(a.shape[:-1])
    out = []
    for t in range(a.shape[-1]):
        h = a[..., t] * h + b[..., t]
        out.append(h)
    return (torch.stack(out, -1) if out else torch.empty_like(a)), h.to(
        torch.float64 if a.dtype == torch.float64 else torch.float32
    )


def _linear_scan_backward_ref(a, h, grad_h, grad_last, h0):
    """The formula: g[t] = dh[t] + a[t+1] g[t+1] from the end (g[L-1] = dh[L-1] + dlast), db = g,
    da[t] = g[t] h[t-1], dh0 = a[0] g[0]."""
    g = grad_last.to(a.dtype) if grad_last is not None else a.new_zeros(a.shape[:-1])
    after = torch.ones_like(g)
    db = torch.empty_like(a)
    for t in reversed(range(a.shape[-1])):
        g = (grad_h[..., t] if grad_h is not None else 0) + after * g
        db[..., t] = g
        after = a[..., t]
    start = h0.to(a.dtype) if h0 is not None else a.new_zeros(a.shape[:-1])
    da = db * torch.cat([start.unsqueeze(-1), h[..., :-1]], -1)
    dh0 = (after * g).to(h0.dtype) if h0 is not None else a.new_empty((0,))
    return da, db, dh0


def _gray_ref(img):
    i = img.to(torch.int32)
    return ((77 * i[..., 0] + 150 * i[..., 1] + 29 * i[..., 2] + 128) >> 8).to(torch.uint8)


@dataclass
class OpSpec:
    build: Callable  # Maker -> the positional arguments of a valid call
    ref: Callable  # the same arguments -> PyTorch's result
    tensors: str  # the tensor arguments, as messages list them
    first: str = "x"  # the argument named by the dtype and contiguity errors
    allowed: str = FLOAT_ALLOWED
    contiguous_only: bool = False  # non-contiguous inputs are an error (the other ops read any layout)
    special: str | None = "naninf"  # NaN / Inf placement compared with PyTorch ("nan": NaN only; None: no floats)
    tol: float = 1e-5
    # (args, kwargs) of awkward calls (odd sizes, misaligned views, optional arguments left out), built by a
    # Factory for one dtype of `sample_dtypes` (CUDA tensors on a GPU, meta tensors for compile-only plans);
    # `grad=True` marks the tensors opcheck and the GPU tests take gradients of.
    samples: Callable = None  # Factory -> list[(args, kwargs)]
    # Calls for the compile-only plans alone (meta tensors: any size is free), (args, kwargs, plan options):
    # the sizes the planners branch on (LLM rows, rows past one block or one cluster, big images, large GEMMs,
    # with {"candidates": True} every configuration tuning would time).
    plans: Callable = None  # Factory -> list[(args, kwargs, options)]

    @property
    def names(self) -> list[str]:
        return [n.strip() for n in self.tensors.split(",")]


def _activation(ref):
    """The row of an activation op (relu, sigmoid, tanh, silu, mish): x in, x's shape out."""
    return OpSpec(
        lambda m: (m.x(*X2),),
        ref,
        "x",
        samples=lambda f: [((f.t(7, 33, grad=True),), {}), ((f.t(1000, offset=1),), {})],
        plans=ACTIVATION_PLANS,
    )


def _activation_backward(ref):
    """The row of an activation's backward op: (grad, the saved input or output)."""
    return OpSpec(
        lambda m: (m.x(*X2), m.x(*X2)),
        ref,
        "grad, saved",
        first="grad",
        samples=lambda f: [((f.t(7, 33), f.t(7, 33)), {})],
    )


def _norm_backward_row(rms):
    """The row of layer_norm_backward / rms_norm_backward: (grad, x, weight, has_bias, eps); layer_norm's has
    a bias, rms_norm's none."""
    has_b = not rms
    eps = 1e-6 if rms else 1e-5
    return OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.w(8), has_b, eps),
        _norm_backward_ref(rms),
        "grad, x, weight",
        special="nan",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 1000), f.t(7, 1000), f.t(1000), has_b, 1e-5), {}),
            ((f.t(5, 33), f.t(5, 33), None, False, 1e-5), {}),
        ],
        plans=lambda f: [
            ((f.t(64, 50257), f.t(64, 50257), f.t(50257), has_b, 1e-5), {}, {}),
            ((f.t(16, 4096), f.t(16, 4096), f.t(4096), has_b, 1e-5), {}, {}),
        ],
    )


X2 = (4, 6)
IMG = (1, 2, 6, 6)
OPS: dict[str, OpSpec] = {
    "relu": _activation(torch.relu),
    "relu_backward": _activation_backward(lambda g, y: A.threshold_backward(g, y, 0)),
    "sigmoid": _activation(torch.sigmoid),
    "sigmoid_backward": _activation_backward(A.sigmoid_backward),
    "tanh": _activation(torch.tanh),
    "tanh_backward": _activation_backward(A.tanh_backward),
    "silu": _activation(F.silu),
    "silu_backward": _activation_backward(A.silu_backward),
    "mish": _activation(F.mish),
    "mish_backward": _activation_backward(A.mish_backward),
    "gelu": OpSpec(
        lambda m: (m.x(*X2), "tanh"),
        lambda x, a: F.gelu(x, approximate=a),
        "x",
        samples=lambda f: [((f.t(5, 129, grad=True),), {}), ((f.t(4097),), {"approximate": "tanh"})],
        plans=lambda f: [((f.t(33, 64).mT,), {"approximate": "tanh"}, {}), ((f.t(1 << 20),), {}, {})],
    ),
    "gelu_backward": OpSpec(
        lambda m: (m.x(*X2), m.x(*X2), "none"),
        lambda g, x, a: A.gelu_backward(g, x, approximate=a),
        "grad, x",
        first="grad",
        samples=lambda f: [((f.t(7, 33), f.t(7, 33)), {"approximate": "tanh"}), ((f.t(1000), f.t(1000)), {})],
    ),
    "sum": OpSpec(lambda m: (m.x(*X2), -1, True), torch.sum, "x", samples=REDUCE_SAMPLES, plans=REDUCE_PLANS),
    "mean": OpSpec(lambda m: (m.x(*X2), -1, False), torch.mean, "x", samples=REDUCE_SAMPLES, plans=REDUCE_PLANS),
    "amax": OpSpec(lambda m: (m.x(*X2), -1, True), torch.amax, "x", samples=REDUCE_SAMPLES, plans=REDUCE_PLANS),
    "amin": OpSpec(lambda m: (m.x(*X2), -1, False), torch.amin, "x", samples=REDUCE_SAMPLES, plans=REDUCE_PLANS),
    "softmax": OpSpec(
        lambda m: (m.x(*X2), -1), torch.softmax, "x", tol=3e-5, samples=SOFTMAX_SAMPLES, plans=LONG_ROW_PLANS
    ),
    "softmax_backward": OpSpec(
        lambda m: (m.x(*X2), m.x(*X2)),
        lambda g, y: A._softmax_backward_data(g, y, -1, y.dtype),
        "grad, output",
        first="output",
        special="nan",
        tol=3e-5,
        samples=lambda f: [((f.t(7, 1000), f.t(7, 1000)), {})],
        plans=lambda f: [((f.t(64, 50257), f.t(64, 50257)), {}, {}), ((f.t(4, 262145), f.t(4, 262145)), {}, {})],
    ),
    "log_softmax": OpSpec(
        lambda m: (m.x(*X2), -1), torch.log_softmax, "x", tol=3e-5, samples=SOFTMAX_SAMPLES, plans=LONG_ROW_PLANS
    ),
    "log_softmax_backward": OpSpec(
        lambda m: (m.x(*X2), m.x(*X2)),
        lambda g, y: A._log_softmax_backward_data(g, y, -1, y.dtype),
        "grad, output",
        first="output",
        special="nan",
        tol=3e-5,
        samples=lambda f: [((f.t(7, 1000), f.t(7, 1000)), {})],
        plans=lambda f: [((f.t(64, 50257), f.t(64, 50257)), {}, {}), ((f.t(4, 262145), f.t(4, 262145)), {}, {})],
    ),
    "layer_norm": OpSpec(
        lambda m: (m.x(4, 8), m.w(8), m.w(8), 1e-5),
        lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps),
        "x, weight, bias",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 1000, grad=True), f.t(1000, grad=True), f.t(1000, grad=True)), {}),
            ((f.t(5, 33, grad=True),), {"eps": 1e-3}),
        ],
        plans=lambda f: [((f.t(64, d), f.t(d), f.t(d)), {}, {}) for d in NORM_ROWS] + [((f.t(64, 50257),), {}, {})],
    ),
    "layer_norm_backward": _norm_backward_row(rms=False),
    "rms_norm": OpSpec(
        lambda m: (m.x(4, 8), m.w(8), 1e-6),
        _rms_ref,
        "x, weight",
        tol=1e-4,
        samples=lambda f: [((f.t(7, 1000, grad=True), f.t(1000, grad=True)), {}), ((f.t(5, 33, grad=True),), {})],
        plans=lambda f: [((f.t(64, d), f.t(d)), {}, {}) for d in NORM_ROWS] + [((f.t(64, 50257),), {}, {})],
    ),
    "rms_norm_backward": _norm_backward_row(rms=True),
    "add_layer_norm": OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.w(8), m.w(8), 1e-5),
        _add_norm_ref(False),
        "x, residual, weight, bias",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 1000, grad=True), f.t(7, 1000, grad=True), f.t(1000, grad=True), f.t(1000, grad=True)), {}),
            ((f.t(5, 33, grad=True), f.t(5, 33, offset=1)), {"eps": 1e-3}),
        ],
        plans=lambda f: [
            ((f.t(64, 4096), f.t(64, 4096), f.t(4096), f.t(4096)), {}, {}),
            ((f.t(8, 50257), f.t(8, 50257)), {}, {}),
        ],
    ),
    "add_layer_norm_backward": OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.x(4, 8), m.w(8), True, 1e-5),
        _add_norm_backward_ref(False),
        "grad, grad_h, h, weight",
        first="h",
        special="nan",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 1000), f.t(7, 1000), f.t(7, 1000), f.t(1000), True, 1e-5), {}),
            ((f.t(5, 33), None, f.t(5, 33), None, False, 1e-5), {}),
        ],
        plans=lambda f: [((f.t(64, 4096), f.t(64, 4096), f.t(64, 4096), f.t(4096), True, 1e-5), {}, {})],
    ),
    "add_rms_norm": OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.w(8), 1e-6),
        _add_norm_ref(True),
        "x, residual, weight",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 1000, grad=True), f.t(7, 1000, grad=True), f.t(1000, grad=True)), {}),
            ((f.t(4097, grad=True), f.t(4097)), {}),
        ],
        plans=lambda f: [((f.t(64, 4096), f.t(64, 4096), f.t(4096)), {}, {}), ((f.t(8, 50257), f.t(8, 50257)), {}, {})],
    ),
    "add_rms_norm_backward": OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.x(4, 8), m.w(8), False, 1e-6),
        _add_norm_backward_ref(True),
        "grad, grad_h, h, weight",
        first="h",
        special="nan",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 1000), f.t(7, 1000), f.t(7, 1000), f.t(1000), False, 1e-5), {}),
            ((f.t(5, 33), None, f.t(5, 33), None, False, 1e-5), {}),
        ],
        plans=lambda f: [((f.t(64, 4096), f.t(64, 4096), f.t(64, 4096), f.t(4096), False, 1e-5), {}, {})],
    ),
    # The matrix ops: bfloat16 (float32 only as TF32, off by default); GEMM sums compared loosely.
    "linear": OpSpec(
        lambda m: (
            m.x(4, 8, dtype=BF16),
            m.w(6, 8, dtype=BF16),
            m.w(6, dtype=BF16),
            "gelu",
            0.5,
            m.x(4, 6, dtype=BF16),
        ),
        _linear_ref,
        "x, weight, bias, residual",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=LINEAR_SAMPLES,
        plans=lambda f: [
            ((f.t(2048, 4096), f.t(11008, 4096), f.t(11008)), {"activation": "gelu"}, {"candidates": True}),
            ((f.t(16, 4096), f.t(4096, 4096)), {"residual": f.t(16, 4096)}, {"candidates": True}),
        ],
    ),
    "linear_aux": OpSpec(
        lambda m: (
            m.x(4, 8, dtype=BF16),
            m.w(6, 8, dtype=BF16),
            m.w(6, dtype=BF16),
            "silu",
            2.0,
            m.x(4, 6, dtype=BF16),
        ),
        lambda *a: (_linear_ref(*a), _linear_pre(*a).to(a[0].dtype)),
        "x, weight, bias, residual",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=LINEAR_SAMPLES,
        plans=lambda f: [
            ((f.t(2048, 4096), f.t(4096, 4096), f.t(4096)), {"activation": "silu", "residual": f.t(2048, 4096)}, {})
        ],
    ),
    "linear_backward": OpSpec(
        lambda m: (
            m.x(4, 6, dtype=BF16),
            m.x(4, 8, dtype=BF16),
            m.w(6, 8, dtype=BF16),
            m.x(4, 6, dtype=BF16),
            "gelu_tanh",
            2.0,
            True,
        ),
        _linear_backward_ref,
        "grad, x, weight, preactivation",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=5e-2,
        samples=lambda f: [
            ((f.t(7, 40), f.t(7, 72), f.t(40, 72), f.t(7, 40), "silu", 2.0, True), {}),
            ((f.t(3, 24), f.t(3, 20), f.t(24, 20), None, None, 1.0, False), {}),
        ],
        plans=lambda f: [
            ((f.t(2048, 4096), f.t(2048, 4096), f.t(4096, 4096), f.t(2048, 4096), "gelu", 1.0, True), {}, {})
        ],
    ),
    "linear_swiglu": OpSpec(
        lambda m: (m.x(4, 8, dtype=BF16), m.w(12, 8, dtype=BF16), m.x(4, 6, dtype=BF16)),
        _swiglu_ref,
        "x, w_gate_up, residual",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=SWIGLU_SAMPLES,
        plans=lambda f: [
            ((f.t(2048, 4096), f.t(2 * 11008, 4096)), {}, {"candidates": True}),
            ((f.t(8, 4096), f.t(2 * 11008, 4096)), {}, {}),
        ],
    ),
    "linear_swiglu_aux": OpSpec(
        lambda m: (m.x(4, 8, dtype=BF16), m.w(12, 8, dtype=BF16), m.x(4, 6, dtype=BF16)),
        lambda x, w, r: (_swiglu_ref(x, w, r), _swiglu_pre(x, w).to(x.dtype)),
        "x, w_gate_up, residual",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=SWIGLU_SAMPLES,
        plans=lambda f: [((f.t(2048, 4096), f.t(2 * 11008, 4096)), {}, {})],
    ),
    "linear_swiglu_backward": OpSpec(
        lambda m: (m.x(4, 6, dtype=BF16), m.x(4, 8, dtype=BF16), m.w(12, 8, dtype=BF16), m.x(4, 12, dtype=BF16)),
        _swiglu_backward_ref,
        "grad, x, w_gate_up, preactivation",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=5e-2,
        samples=lambda f: [((f.t(7, 40), f.t(7, 72), f.t(80, 72), f.t(7, 80)), {})],
        plans=lambda f: [((f.t(2048, 11008), f.t(2048, 4096), f.t(2 * 11008, 4096), f.t(2048, 2 * 11008)), {}, {})],
    ),
    "matmul": OpSpec(
        lambda m: (m.x(4, 8, dtype=BF16), m.w(8, 6, dtype=BF16)),
        lambda a, b: (a.float() @ b.float()).to(a.dtype),
        "a, b",
        first="a",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=lambda f: [
            ((f.t(7, 72, grad=True), f.t(72, 33, grad=True)), {}),
            ((f.t(2, 5, 16, grad=True), f.t(16, 24, grad=True)), {}),
        ],
        plans=lambda f: [((f.t(2048, 4096), f.t(4096, 4096)), {}, {})],
    ),
    "matmul_backward": OpSpec(
        lambda m: (m.x(4, 6, dtype=BF16), m.x(4, 8, dtype=BF16), m.w(8, 6, dtype=BF16)),
        lambda g, a, b: ((g.float() @ b.float().T).to(a.dtype), (a.float().T @ g.float()).to(a.dtype)),
        "grad, a, b",
        first="a",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=5e-2,
        samples=lambda f: [((f.t(7, 33), f.t(7, 72), f.t(72, 33)), {})],
        plans=lambda f: [((f.t(2048, 4096), f.t(2048, 4096), f.t(4096, 4096)), {}, {})],
    ),
    "bmm": OpSpec(
        lambda m: (m.x(2, 4, 8, dtype=BF16), m.x(2, 8, 6, dtype=BF16)),
        lambda a, b: torch.bmm(a.float(), b.float()).to(a.dtype),
        "a, b",
        first="a",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=lambda f: [((f.t(3, 7, 72, grad=True), f.t(3, 72, 33, grad=True)), {})],
        plans=lambda f: [((f.t(8, 512, 4096), f.t(8, 4096, 512)), {}, {})],
    ),
    "bmm_backward": OpSpec(
        lambda m: (m.x(2, 4, 6, dtype=BF16), m.x(2, 4, 8, dtype=BF16), m.x(2, 8, 6, dtype=BF16)),
        lambda g, a, b: (
            torch.bmm(g.float(), b.float().transpose(1, 2)).to(a.dtype),
            torch.bmm(a.float().transpose(1, 2), g.float()).to(a.dtype),
        ),
        "grad, a, b",
        first="a",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=5e-2,
        samples=lambda f: [((f.t(3, 7, 33), f.t(3, 7, 72), f.t(3, 72, 33)), {})],
        plans=lambda f: [((f.t(8, 512, 512), f.t(8, 512, 4096), f.t(8, 4096, 512)), {}, {})],
    ),
    "max_pool2d": OpSpec(
        lambda m: (m.x(*IMG), [2, 2], [2, 2], [0, 0]),
        F.max_pool2d,
        "x",
        samples=lambda f: [
            ((f.t(2, 3, 9, 11, grad=True), [3, 3], [2, 2], [1, 1]), {}),
            ((f.t(3, 8, 8, grad=True), [2, 2]), {}),
        ],
        plans=lambda f: [
            ((f.t(32, 64, 56, 56), [3, 3], [2, 2], [1, 1]), {}, {}),
            ((f.t(32, 64, 56, 56), [2, 2]), {}, {}),
            ((f.t(8, 16, 57, 33), [3, 2], [1, 2], [1, 1]), {}, {}),
        ],
    ),
    "max_pool2d_backward": OpSpec(
        lambda m: (m.x(1, 2, 3, 3), m.x(*IMG), [2, 2], [2, 2], [0, 0]),
        _pool_backward_ref(F.max_pool2d),
        "grad, x",
        samples=lambda f: [((f.t(2, 3, 5, 6), f.t(2, 3, 9, 11), [3, 3], [2, 2], [1, 1]), {})],
        plans=lambda f: [((f.t(32, 64, 28, 28), f.t(32, 64, 56, 56), [3, 3], [2, 2], [1, 1]), {}, {})],
    ),
    "avg_pool2d": OpSpec(
        lambda m: (m.x(*IMG), [3, 3], [2, 2], [1, 1], False),
        lambda x, k, s, p, c: F.avg_pool2d(x, k, s, p, False, c),
        "x",
        samples=lambda f: [((f.t(2, 3, 9, 11, grad=True), [3, 3], [2, 2], [1, 1], False), {})],
        plans=lambda f: [
            ((f.t(32, 64, 56, 56), [3, 3], [1, 1], [1, 1], True), {}, {}),
            ((f.t(32, 64, 56, 56), [2, 2], [2, 2], [0, 0], True), {}, {}),
        ],
    ),
    "avg_pool2d_backward": OpSpec(
        lambda m: (m.x(1, 2, 3, 3), m.x(*IMG), [3, 3], [2, 2], [1, 1], True),
        _pool_backward_ref(lambda x, k, s, p, c: F.avg_pool2d(x, k, s, p, False, c)),
        "grad, x",
        samples=lambda f: [((f.t(2, 3, 5, 6), f.t(2, 3, 9, 11), [3, 3], [2, 2], [1, 1], True), {})],
        plans=lambda f: [((f.t(32, 64, 28, 28), f.t(32, 64, 56, 56), [2, 2], [2, 2], [0, 0], True), {}, {})],
    ),
    # The dense convolutions: GEMMs (TF32 for float32, PyTorch's convolution default), compared loosely.
    "conv1d": OpSpec(
        lambda m: (m.x(2, 3, 8), m.w(4, 3, 3), m.w(4), 1, 1, 1, 1),
        _conv_ref(False),
        "x, weight, bias",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=lambda f: [
            # The U-Net's Conv1dBlock (k=5, padding 2) at horizon 16, channels no multiple of 8.
            ((f.t(2, 20, 16, grad=True), f.t(28, 20, 5, grad=True), f.t(28, grad=True)), {"padding": 2}),
            # Its Downsample1d (k=3, stride 2), a horizon of 1 and of 3, K = 3 * 3 padded to 16, dilation.
            ((f.t(3, 16, 3, grad=True), f.t(16, 16, 3, grad=True), f.t(16)), {"stride": 2, "padding": 1}),
            ((f.t(2, 3, 1, grad=True), f.t(5, 3, 3, grad=True)), {"padding": 1}),
            ((f.t(2, 3, 9, grad=True), f.t(6, 3, 2, grad=True)), {"stride": 3, "padding": 2, "dilation": 2}),
            # Unbatched, a misaligned x; a 1x1 convolution (the residual blocks' projection).
            ((f.t(7, 10, offset=1), f.t(4, 7, 1), f.t(4)), {}),
        ],
        plans=lambda f: [
            ((f.t(1, 1024, 16), f.t(1024, 1024, 5), f.t(1024)), {"padding": 2}, {}),
            ((f.t(64, 1024, 16), f.t(1024, 1024, 5), f.t(1024)), {"padding": 2}, {}),
            ((f.t(64, 256, 16), f.t(256, 256, 3), f.t(256)), {"stride": 2, "padding": 1}, {}),
        ],
    ),
    "conv1d_backward": OpSpec(
        lambda m: (m.x(2, 4, 8), m.x(2, 3, 8), m.w(4, 3, 3), 1, 1, 1, 1, True),
        _conv_backward_ref(False),
        "grad, x, weight",
        first="x",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=5e-2,
        samples=lambda f: [
            ((f.t(2, 28, 16), f.t(2, 20, 16), f.t(28, 20, 5)), {"padding": 2, "has_bias": True}),
            ((f.t(3, 6, 4), f.t(3, 3, 9), f.t(6, 3, 2)), {"stride": 3, "padding": 2, "dilation": 2}),
            ((f.t(4, 10), f.t(7, 10, offset=1), f.t(4, 7, 1)), {"has_bias": True}),
        ],
        plans=lambda f: [
            ((f.t(64, 1024, 16), f.t(64, 1024, 16), f.t(1024, 1024, 5)), {"padding": 2, "has_bias": True}, {})
        ],
    ),
    "conv_transpose1d": OpSpec(
        lambda m: (m.x(2, 3, 8), m.w(3, 4, 4), m.w(4), 2, 1, 0, 1, 1),
        _conv_ref(True),
        "x, weight, bias",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=3e-2,
        samples=lambda f: [
            # The U-Net's Upsample1d (k=4, stride 2, padding 1), channels no multiple of 8.
            ((f.t(2, 20, 8, grad=True), f.t(20, 12, 4, grad=True), f.t(12, grad=True)), {"stride": 2, "padding": 1}),
            ((f.t(3, 5, 1, grad=True), f.t(5, 7, 3, grad=True)), {"stride": 3, "output_padding": 2, "dilation": 2}),
            ((f.t(6, 3, offset=1), f.t(6, 3, 2), f.t(3)), {}),
        ],
        plans=lambda f: [
            ((f.t(1, 1024, 8), f.t(1024, 1024, 4), f.t(1024)), {"stride": 2, "padding": 1}, {}),
            ((f.t(64, 512, 8), f.t(512, 512, 4), f.t(512)), {"stride": 2, "padding": 1}, {}),
        ],
    ),
    "conv_transpose1d_backward": OpSpec(
        lambda m: (m.x(2, 4, 16), m.x(2, 3, 8), m.w(3, 4, 4), 2, 1, 0, 1, 1, True),
        _conv_backward_ref(True),
        "grad, x, weight",
        first="x",
        allowed=MATRIX_ALLOWED,
        special=None,
        tol=5e-2,
        samples=lambda f: [
            ((f.t(2, 12, 16), f.t(2, 20, 8), f.t(20, 12, 4)), {"stride": 2, "padding": 1, "has_bias": True}),
            ((f.t(3, 7, 7), f.t(3, 5, 1), f.t(5, 7, 3)), {"stride": 3, "output_padding": 2, "dilation": 2}),
        ],
        plans=lambda f: [
            ((f.t(64, 512, 16), f.t(64, 512, 8), f.t(512, 512, 4)), {"stride": 2, "padding": 1, "has_bias": True}, {})
        ],
    ),
    # The DDPM sampler's step, its schedule on the device.
    "ddpm_coefficients": OpSpec(
        lambda m: (m.w(10), 1),
        _ddpm_coefficients_ref,
        "betas",
        first="betas",
        special=None,
        tol=1e-5,
        samples=lambda f: [((f.t(100).abs() * 0.02 + 1e-4,), {}), ((f.t(1000).abs() * 0.01 + 1e-4, 10), {})],
    ),
    "ddpm_step": OpSpec(
        lambda m: (m.x(4, 16), m.x(4, 16), m.x(4, 16), m.w(8, 5, dtype=torch.float32), 3, True, 1.0),
        _ddpm_step_ref,
        "x, eps, noise, coefficients",
        tol=1e-5,
        samples=lambda f: [
            # The policy's action sample [B, horizon, action dim], a misaligned one, no noise (the last step).
            (
                (
                    f.t(2, 16, 10, grad=True),
                    f.t(2, 16, 10, grad=True),
                    f.t(2, 16, 10, grad=True),
                    f.t(8, 5, dtype=torch.float32),
                    5,
                ),
                {},
            ),
            (
                (f.t(33, offset=1, grad=True), f.t(33, grad=True), None, f.t(8, 5, dtype=torch.float32), 0),
                {"clip_sample": False},
            ),
            ((f.t(3, 7), f.t(3, 7), f.t(3, 7), f.t(100, 5, dtype=torch.float32), 99), {"clip_sample_range": 0.5}),
        ],
        plans=lambda f: [
            ((f.t(64, 16, 10), f.t(64, 16, 10), f.t(64, 16, 10), f.t(100, 5, dtype=torch.float32), 7), {}, {})
        ],
    ),
    # The sequence ops.
    "causal_conv1d": OpSpec(
        lambda m: (m.x(2, 3, 8), m.w(3, 4), m.w(3), m.x(2, 3, 3), None),
        _causal_conv1d_ref,
        "x, weight, bias, initial_state",
        samples=lambda f: [
            ((f.t(2, 33, 257, grad=True), f.t(33, 4, grad=True), f.t(33, grad=True)), {}),
            ((f.t(3, 5, 64, grad=True), f.t(5, 3, grad=True), None, f.t(3, 5, 2, grad=True)), {"activation": "silu"}),
        ],
        plans=lambda f: [
            ((f.t(4, 4096, 4096), f.t(4096, 4), f.t(4096)), {"activation": "silu"}, {}),
            ((f.t(2, 64, 1001), f.t(64, 2)), {}, {}),
        ],
    ),
    "causal_conv1d_backward": OpSpec(
        lambda m: (m.x(2, 3, 8), m.x(2, 3, 3), m.x(2, 3, 8), m.w(3, 4), m.w(3), m.x(2, 3, 3), "silu"),
        _causal_conv1d_backward_ref,
        "grad, grad_final_state, x, weight, bias, initial_state",
        special="nan",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(2, 33, 257), None, f.t(2, 33, 257), f.t(33, 4), f.t(33), None, "silu"), {}),
            ((f.t(2, 5, 9), f.t(2, 5, 1), f.t(2, 5, 9), f.t(5, 2), None, f.t(2, 5, 1), None), {}),
        ],
        plans=lambda f: [
            ((f.t(4, 4096, 4096), None, f.t(4, 4096, 4096), f.t(4096, 3), f.t(4096), None, "silu"), {}, {})
        ],
    ),
    "group_norm": OpSpec(
        lambda m: (m.x(2, 4, 3), 2, m.w(4), m.w(4), 1e-5, "mish", m.x(2, 4), m.x(2, 4), m.x(2, 4, 3)),
        _group_norm_ref,
        "x, weight, bias, scale, shift, residual",
        tol=1e-4,
        samples=lambda f: [
            # The U-Net's first block: FiLM as [B, C, 1] terms after the Mish.
            (
                (f.t(2, 24, 5, grad=True), 8, f.t(24, grad=True), f.t(24, grad=True)),
                {"activation": "mish", "scale": f.t(2, 24, 1, grad=True), "shift": f.t(2, 24, 1, grad=True)},
            ),
            # Its second: the residual after the Mish; a horizon of 1, two channels a group, no affine.
            ((f.t(3, 6, 1, grad=True), 3), {"activation": "silu", "residual": f.t(3, 6, 1, grad=True)}),
            # The halves of one [B, 2, C] embedding (batch stride 2C), a misaligned 4-D x.
            ((f.t(2, 6, 3, 4, offset=1, grad=True), 2), {"scale": f.t(2, 2, 6)[:, 0], "shift": f.t(2, 2, 6)[:, 1]}),
        ],
        plans=lambda f: [
            ((f.t(64, 1024, 4), 8, f.t(1024), f.t(1024)), {"activation": "mish", "residual": f.t(64, 1024, 4)}, {}),
            ((f.t(8, 64, 4096), 32), {"scale": f.t(8, 64), "shift": f.t(8, 64)}, {}),
        ],
    ),
    "group_norm_forward": OpSpec(
        lambda m: (m.x(2, 4, 3), 2, m.w(4), m.w(4), 1e-5, "silu", m.x(2, 4), m.x(2, 4), m.x(2, 4, 3)),
        _group_norm_forward_ref,
        "x, weight, bias, scale, shift, residual",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(2, 24, 5, grad=True), 8, f.t(24, grad=True), f.t(24, grad=True)), {"activation": "mish"}),
            ((f.t(3, 6, 7, offset=1), 3), {}),
        ],
        plans=lambda f: [((f.t(1, 256, 16), 8, f.t(256), f.t(256)), {"activation": "mish"}, {})],
    ),
    "group_norm_backward": OpSpec(
        lambda m: _group_norm_backward_args(m.x(2, 4, 3), m.x(2, 4, 3), 2, m.w(4), m.w(4), "mish", m.x(2, 4), True),
        _group_norm_backward_ref,
        "grad, x, mean, rstd, weight, bias, scale",
        first="x",
        special="nan",
        tol=1e-4,
        samples=lambda f: [
            (
                _group_norm_backward_args(
                    f.t(2, 24, 5), f.t(2, 24, 5), 8, f.t(24), f.t(24), "mish", f.t(2, 24, 1), True
                ),
                {},
            ),
            (_group_norm_backward_args(f.t(3, 6, 1), f.t(3, 6, 1), 3), {"activation": "silu"}),
        ],
        plans=lambda f: [
            (_group_norm_backward_args(f.t(64, 1024, 4), f.t(64, 1024, 4), 8, f.t(1024), f.t(1024), "mish"), {}, {})
        ],
    ),
    "linear_scan": OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.x(4)),
        _linear_scan_ref,
        "a, b, h0",
        first="a",
        special="nan",
        samples=lambda f: [
            ((f.decay(7, 1000, grad=True), f.t(7, 1000, grad=True)), {}),
            ((f.decay(7, 33, grad=True), f.t(7, 33, grad=True), f.t(7, dtype=torch.float32, grad=True)), {}),
        ],
        plans=lambda f: [((f.decay(64, 4096), f.t(64, 4096)), {}, {})],
    ),
    "linear_scan_backward": OpSpec(
        lambda m: (m.x(4, 8), m.x(4, 8), m.x(4, 8), m.x(4), m.x(4)),
        _linear_scan_backward_ref,
        "a, h, grad_h, grad_last, h0",
        first="a",
        special="nan",
        tol=1e-4,
        samples=lambda f: [
            ((f.t(7, 33), f.t(7, 33), f.t(7, 33), None, f.t(7, dtype=torch.float32)), {}),
            ((f.t(3, 1000), f.t(3, 1000), None, f.t(3, dtype=torch.float32), None), {}),
        ],
        plans=lambda f: [((f.t(64, 4096), f.t(64, 4096), f.t(64, 4096), None, None), {}, {})],
    ),
    "add_constant": OpSpec(
        lambda m: (m.x(*X2), 2.5),
        torch.add,
        "x",
        contiguous_only=True,
        samples=lambda f: [((f.t(1000, grad=True), 2.5), {})],
    ),
    "rgb_to_gray": OpSpec(
        lambda m: (m.u8(5, 7, 3),),
        _gray_ref,
        "img",
        first="img",
        allowed=U8_ALLOWED,
        contiguous_only=True,
        special=None,
        tol=0,
        samples=lambda f: [((f.u8(2, 5, 7, 3),), {})],
        plans=lambda f: [((f.u8(1080, 1920, 3),), {}, {})],
    ),
    "outer": OpSpec(
        lambda m: (m.x(2, 3), m.x(2, 4)),
        lambda a, b: a.unsqueeze(-1) * b.unsqueeze(-2),
        "a, b",
        first="a",
        contiguous_only=True,
        samples=lambda f: [((f.t(3, 7, grad=True), f.t(3, 33, grad=True)), {})],
    ),
    "outer_backward": OpSpec(
        lambda m: (m.x(2, 3, 4), m.x(2, 3), m.x(2, 4)),
        lambda g, a, b: ((g * b.unsqueeze(-2)).sum(-1), (g * a.unsqueeze(-1)).sum(-2)),
        "grad, a, b",
        first="a",
        contiguous_only=True,
        samples=lambda f: [((f.t(3, 7, 33), f.t(3, 7), f.t(3, 33)), {})],
    ),
    "fused_update": OpSpec(
        lambda m: (m.x(*X2), m.x(*X2), m.x(*X2), 0.5, -1.5, 0.25),
        lambda x, mo, n, a, b, c: a * x + b * mo + c * n,
        "x, model_out, noise",
        contiguous_only=True,
        samples=lambda f: [((f.t(7, 33, grad=True), f.t(7, 33, grad=True), f.t(7, 33), 0.5, 2.0, -1.0), {})],
    ),
}


# The row's dtypes, from what its dtype error allows.
OpSpec.dtypes = property(lambda self: DTYPES[self.allowed])
OpSpec.sample_dtypes = property(lambda self: SAMPLE_DTYPES[self.allowed])


def samples(name: str, device: str, dtype: torch.dtype, seed: int = 0) -> list[tuple[tuple, dict]]:
    """Op `name`'s samples of `dtype` on `device`."""
    return OPS[name].samples(Factory(device, dtype, seed))


def plans(name: str, dtype: torch.dtype) -> list[tuple[tuple, dict, dict]]:
    """Op `name`'s plan-only calls of `dtype` (meta tensors), with their plan options."""
    spec = OPS[name]
    return spec.plans(Factory("meta", dtype)) if spec.plans else []


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def check_op(name: str, m: Maker, tol: float | None = None):
    """Calls kjit.ops.<name> on m's tensors and compares with PyTorch: shapes and dtypes on meta,
    values too (NaN where PyTorch has NaN, the same infinities) elsewhere."""
    spec = OPS[name]
    args = spec.build(m)
    out = _as_tuple(getattr(ops, name)(*args))
    ref = _as_tuple(spec.ref(*args))
    assert len(out) == len(ref), name
    tol = spec.tol if tol is None else tol
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype and o.device == r.device, (name, o, r)
        if o.device.type != "meta":
            torch.testing.assert_close(o, r, rtol=tol, atol=tol, equal_nan=True, msg=lambda s: f"{name}: {s}")
    return out
