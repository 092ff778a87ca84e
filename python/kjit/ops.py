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
``ValueError`` / ``TypeError`` saying what was received and what to do.
"""

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.kjit.*)

add_constant = torch.ops.kjit.add_constant.default
rgb_to_gray = torch.ops.kjit.rgb_to_gray.default
outer = torch.ops.kjit.outer.default
outer_backward = torch.ops.kjit.outer_backward.default
fused_update = torch.ops.kjit.fused_update.default

__all__ = ["add_constant", "rgb_to_gray", "outer", "outer_backward", "fused_update"]
