"""The kernel library behind kjit.ops: memory-bound ops on the templates of kernel_templates/,
specialized per call on dtype, sizes and alignment, registered as torch.ops.kjit.* (see kjit.ops)."""

from . import activations, norms, pooling, reductions, softmax  # noqa: F401
