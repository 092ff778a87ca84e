"""Built-in ops: JIT-specialized CUDA kernels registered with PyTorch as ``torch.ops.kjit.*``.

Each op is defined once, in C++ (python/src/ops/, see docs/adding-an-op.md): its schema, its CUDA
implementation (argument checks, launch geometry, the in-memory kernel table, one ``cuLaunchKernelEx`` on
the current stream), a Meta implementation (fake tensors, ``torch.compile(fullgraph=True)``) and, where a
backward exists, C++ autograd. ``kjit.ops.<name>`` is the op's direct entry, a C function: when nothing
needs the dispatcher (plain CUDA tensors, no tensor that requires grad, no fake / functional / vmap
tensor or dispatch mode, no TorchFunctionMode, arguments of their schema types) it runs the CUDA
implementation itself; otherwise it calls ``torch.ops.kjit.<name>.default`` with the same arguments, so
autograd, subclasses, modes and the dispatcher's argument errors behave as through torch.ops. Under
``torch.compile``, Dynamo traces ``torch.ops.kjit.<name>.default`` in its place (no graph break).
``kjit.stats()["op_calls"]`` counts the calls each way. Inside CUDA graph capture they work after a
warm-up call (compiling during capture is an error).

``add_constant(x, c)``
    ``x + c`` for float32 / float16 / bfloat16 / float64 CUDA tensors. ``c`` is a runtime kernel
    argument: changing it never recompiles. Gradient: ``grad`` for ``x``.
``rgb_to_gray(img)``
    Interleaved RGB uint8 ``[H, W, 3]`` or ``[B, H, W, 3]`` to gray ``[H, W]`` / ``[B, H, W]`` (BT.601
    weights in 8-bit fixed point: ``(77 R + 150 G + 29 B + 128) >> 8``). Specialized on ``H`` and
    ``W``: one compile per distinct image size, then cached.
``outer(a, b)``
    Batched outer product ``[B, M] x [B, N] -> [B, M, N]`` (or ``[M] x [N] -> [M, N]``). Gradients
    through ``outer_backward(grad, a, b) -> (grad_a, grad_b)`` (float accumulation for half types).
``fused_update(x, model_out, noise, a, b, c)``
    ``a * x + b * model_out + c * noise`` in one kernel; ``a``, ``b``, ``c`` are runtime arguments.
    Gradients ``a * grad``, ``b * grad``, ``c * grad``.

The seed ops above need contiguous CUDA tensors of one device and one dtype; anything else raises
``ValueError`` / ``TypeError`` saying what was received and what to do. Arguments that do not fit the
operator's schema (a list where a Tensor goes, a str where an int goes, too many or missing arguments,
an unknown keyword) are rejected by the PyTorch dispatcher: its ``RuntimeError`` names the argument, the
type it found and the declaration.

The kernel library (templates in kernel_templates/; float32, float16, bfloat16 and float64; any layout,
made contiguous where a row kernel needs it):

``relu(x)``, ``sigmoid(x)``, ``tanh(x)``, ``silu(x)``, ``gelu(x, approximate='none'|'tanh')``
    Activations (elementwise functions of kernel_templates/math.cuh), with backward (``*_backward``).
``sum``, ``mean``, ``amax``, ``amin`` ``(x, dim=-1, keepdim=False)``
    Reductions over any one dim; half types accumulate in float.
``softmax(x, dim=-1)``, ``log_softmax(x, dim=-1)``
    Over the last dim, with backward.
``layer_norm(x, weight=None, bias=None, eps=1e-5)``, ``rms_norm(x, weight=None, eps=1e-6)``
    Over the last dim, with backward (dx, dweight, dbias).
``add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5)``, ``add_rms_norm(x, residual, weight=None, eps=1e-6)``
    The residual add of a transformer block fused into the norm: returns ``(y, h)`` with
    ``h = x + residual`` (``residual`` has ``x``'s shape and dtype; ``h`` is rounded to it) and
    ``y = layer_norm(h, ...)`` / ``rms_norm(h, ...)`` of that rounded ``h``, as eager
    ``F.rms_norm(x + residual, ...)`` gives, in one pass over the rows (two fresh tensors). With backward
    (``*_backward(grad, grad_h, h, weight, has_bias, eps) -> (dx, dresidual, dweight, dbias)``, which saves
    ``h`` only and adds ``grad_h`` (None: nothing) in the norm's backward pass).
``max_pool2d(x, kernel_size, stride=kernel_size, padding=0)``, ``avg_pool2d(..., count_include_pad=True)``
    NCHW, window specialized, with backward.

The sequence ops (over the last dim, time; batch, channels and length are never specialized):

``causal_conv1d(x, weight, bias=None, initial_state=None, activation=None) -> (y, final_state)``
    Mamba's short causal depthwise convolution: ``y = activation(F.conv1d(x, weight.unsqueeze(1), bias,
    padding=W-1, groups=D)[..., :L])`` for ``x`` ``[B, D, L]`` (or ``[D, L]``; any batch / channel strides
    with a unit stride along ``L``, so a projection's output viewed as ``[B, D, L]`` needs no copy),
    ``weight`` ``[D, W]`` (or ``nn.Conv1d``'s ``[D, 1, W]``) with ``W`` 2, 3 or 4, ``activation`` ``None``
    or ``'silu'``. ``initial_state`` ``[B, D, W-1]`` replaces the zero padding (decoding in chunks);
    ``final_state`` is the last ``W-1`` inputs to continue from. With backward for every tensor input
    (``causal_conv1d_backward``).
``linear_scan(a, b, h0=None) -> (h, h_last)``
    The linear recurrence ``h[t] = a[t] * h[t-1] + b[t]`` over the last dim (``h[-1] = h0`` or 0), run in
    parallel over time: one read of ``a`` and ``b``, one write of ``h``. ``h`` has the inputs' dtype;
    the state is carried in float32 (float64 for float64 inputs) and each ``h`` is rounded once, so 16-bit
    results are closer to the exact recurrence than a 16-bit Python loop; ``h_last`` (``a.shape[:-1]``) is
    returned in that state dtype. NaN and inf in ``b`` and NaN in ``a`` propagate as in the loop; an
    infinite ``a`` can give NaN where the loop gives +-inf (the parallel form multiplies products of ``a``).
    With backward for ``a``, ``b`` and ``h0`` (``linear_scan_backward``, which saves ``h``; for 16-bit inputs
    the gradient of ``a`` uses the rounded ``h``).

The matrix ops (bfloat16 / float16 on tensor cores, float32 accumulation; float32 as TF32 where
``torch.backends.cuda.matmul.allow_tf32`` allows it, refused otherwise, saying so). Their GEMM kernels (kernel_templates/gemm_sm90.cuh: TMA + wgmma on sm_90; gemm.cuh: mma.sync elsewhere
and for M <= 16) are specialized on N, K, dtype, tile and epilogue; M is a runtime argument:

``linear(x, weight, bias=None, activation=None, scale=1.0, residual=None)``
    ``activation(scale * (x @ weight.T) + bias) + residual`` in one kernel, ``weight`` ``[N, K]`` as in
    ``F.linear``; ``activation`` ``None``, ``'relu'``, ``'gelu'``, ``'gelu_tanh'`` or ``'silu'``. With backward
    (``linear_backward``; ``linear_aux`` is the forward that also returns the pre-activation it needs).
``linear_swiglu(x, w_gate_up, residual=None)``
    The gated MLP ``silu(x @ w_gate.T) * (x @ w_up.T)`` for ``w_gate_up = torch.cat([w_gate, w_up])``
    ``[2F, K]``: one kernel, one read of ``x``, the two products never written. With backward
    (``linear_swiglu_backward``, ``linear_swiglu_aux``).
``matmul(a, b)``, ``bmm(a, b)``
    ``[..., M, K] @ [K, N]`` and ``[B, M, K] @ [B, K, N]``, with backward.
Operands the kernels cannot read as they are (a ``K`` that is not a multiple of 8, rows that are not 16-byte
aligned, a transposed last dim) are copied into ones they can first.

Row kernels specialize on the row length up to ``KJIT_MAX_SPECIALIZATIONS`` distinct lengths per
kernel, then run a generic variant (a warning says so once; ``kjit.stats()["specializations"]``).
"""

import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING

from ._requires_torch import require

require("kjit.ops")

import torch  # noqa: E402

from . import _C  # noqa: E402
from . import _core  # noqa: E402

__all__ = [
    "add_constant",
    "rgb_to_gray",
    "outer",
    "outer_backward",
    "fused_update",
    "relu",
    "relu_backward",
    "sigmoid",
    "sigmoid_backward",
    "tanh",
    "tanh_backward",
    "silu",
    "silu_backward",
    "gelu",
    "gelu_backward",
    "sum",
    "mean",
    "amax",
    "amin",
    "softmax",
    "softmax_backward",
    "log_softmax",
    "log_softmax_backward",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
    "add_layer_norm",
    "add_layer_norm_backward",
    "add_rms_norm",
    "add_rms_norm_backward",
    "max_pool2d",
    "max_pool2d_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
    "causal_conv1d",
    "causal_conv1d_backward",
    "linear_scan",
    "linear_scan_backward",
    "linear",
    "linear_aux",
    "linear_backward",
    "linear_swiglu",
    "linear_swiglu_aux",
    "linear_swiglu_backward",
    "matmul",
    "matmul_backward",
    "bmm",
    "bmm_backward",
]

_missing = [name for name in __all__ if not hasattr(_C.ops, name)]
if _missing:  # every op of the list is defined with KJIT_OP in python/src/ops/
    raise ImportError(f"kjit._C.ops lacks {_missing}: the extension and the Python package do not match; reinstall")

globals().update({name: getattr(_C.ops, name) for name in __all__})
if TYPE_CHECKING:  # the same functions as type checkers see them (their stubs: kjit/_C/ops.pyi)
    from ._C.ops import *  # noqa: F403


def registered(name: str) -> "torch._ops.OpOverload":
    """The registered operator behind kjit.ops.<name> (torch.ops.kjit.<name>.default)."""
    return getattr(torch.ops.kjit, name).default


def _polyfill(op):
    def traced(*args, **kwargs):
        return op(*args, **kwargs)

    return traced


_registered_with_dynamo = False


def _register_with_dynamo() -> None:
    """Dynamo traces torch.ops.kjit.<name>.default where the code calls the direct entry kjit.ops.<name>.
    Never fails the import it runs in: a torch without substitute_in_graph gets a warning (kjit.ops then
    break torch.compile graphs; torch.ops.kjit.* do not)."""
    global _registered_with_dynamo
    if _registered_with_dynamo:
        return
    _registered_with_dynamo = True
    try:
        from torch._dynamo import substitute_in_graph

        for name in __all__:
            substitute_in_graph(getattr(_C.ops, name), skip_signature_check=True)(_polyfill(registered(name)))
    except Exception as e:  # noqa: BLE001  (whatever this torch does, its own import must go on)
        import warnings

        warnings.warn(
            f"kjit: could not register kjit.ops with torch.compile ({type(e).__name__}: {e}); under "
            "torch.compile call torch.ops.kjit.<name> instead",
            _core.KjitWarning,
            stacklevel=2,
        )


class _AfterDynamoImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Registers the direct entries with Dynamo right after torch._dynamo is imported (importing it
    costs seconds, which `import kjit` must not pay)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        module.__spec__.loader = module.__loader__ = self._inner  # torch._dynamo keeps its own loader
        self._inner.exec_module(module)
        _register_with_dynamo()


if "torch._dynamo" in sys.modules:
    _register_with_dynamo()
else:
    sys.meta_path.insert(0, _AfterDynamoImport())
