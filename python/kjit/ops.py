"""Built-in ops: JIT-specialized CUDA kernels registered with PyTorch as ``torch.ops.kjit.*``.

Each name below *is* the registered operator (``torch.ops.kjit.<name>.default``), not a Python wrapper:
a call goes straight into the C++ dispatcher (argument checks, the in-memory kernel table, one
``cuLaunchKernelEx`` on the current stream), with no Python frame of ours in between. The operators
carry Meta implementations (fake tensors, ``torch.compile(fullgraph=True)``) and, where a backward
exists, C++ autograd, so they work with autograd, ``torch.compile`` and CUDA graph capture (after a
warm-up call, since compiling during capture is an error).

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

Inputs must be contiguous CUDA tensors of one device and one dtype; anything else raises
``ValueError`` / ``TypeError`` saying what was received and what to do. Arguments that do not fit the
operator's schema (a list where a Tensor goes, a str where an int goes, too many or missing arguments,
an unknown keyword) are rejected by the PyTorch dispatcher before kjit sees them: its ``RuntimeError``
names the argument, the type it found and the declaration.

The kernel library (kjit/library/, templates in kernel_templates/; float32, float16, bfloat16 and
float64; any layout, made contiguous where a row kernel needs it):

``relu(x)``, ``sigmoid(x)``, ``tanh(x)``, ``silu(x)``, ``gelu(x, approximate='none'|'tanh')``
    Activations built on kjit.elementwise, with backward (``*_backward``).
``sum``, ``mean``, ``amax``, ``amin`` ``(x, dim=-1, keepdim=False)``
    Reductions over any one dim; half types accumulate in float.
``softmax(x, dim=-1)``, ``log_softmax(x, dim=-1)``
    Over the last dim, with backward.
``layer_norm(x, weight=None, bias=None, eps=1e-5)``, ``rms_norm(x, weight=None, eps=1e-6)``
    Over the last dim, with backward (dx, dweight, dbias).
``max_pool2d(x, kernel_size, stride=kernel_size, padding=0)``, ``avg_pool2d(..., count_include_pad=True)``
    NCHW, window specialized, with backward.

Row kernels specialize on the row length up to ``KJIT_MAX_SPECIALIZATIONS`` distinct lengths per
kernel, then run a generic variant (a warning says so once; ``kjit.stats()["specializations"]``).
"""

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.kjit.*)
from .library.activations import (gelu, gelu_backward, relu, relu_backward, sigmoid, sigmoid_backward, silu,
                                  silu_backward, tanh, tanh_backward)
from .library.norms import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward
from .library.pooling import avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward
from .library.reductions import amax, amin, mean
from .library.reductions import sum  # noqa: A004  (kjit.ops.sum, as torch.sum)
from .library.softmax import log_softmax, log_softmax_backward, softmax, softmax_backward

add_constant = torch.ops.kjit.add_constant.default
rgb_to_gray = torch.ops.kjit.rgb_to_gray.default
outer = torch.ops.kjit.outer.default
outer_backward = torch.ops.kjit.outer_backward.default
fused_update = torch.ops.kjit.fused_update.default

__all__ = [
    "add_constant", "rgb_to_gray", "outer", "outer_backward", "fused_update",
    "relu", "relu_backward", "sigmoid", "sigmoid_backward", "tanh", "tanh_backward", "silu", "silu_backward",
    "gelu", "gelu_backward", "sum", "mean", "amax", "amin", "softmax", "softmax_backward", "log_softmax",
    "log_softmax_backward", "layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward",
    "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
]
