"""Launch geometry of the row kernels (reductions over the last dim, softmax, norms).

A row of d elements is handled by TPR threads (a power of two, 32 to 1024), ROWS rows per block; each
thread takes ITEMS vectors of VEC elements. VEC is the widest access (16 bytes at most) that divides
d and to which every row pointer is aligned; TPR aims at a few vectors per thread. Rows whose
share per thread would exceed `max_per_thread` elements are streamed (ITEMS = 0) where the kernel
supports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import registry


@dataclass(frozen=True)
class RowGeometry:
    tpr: int
    rows_per_block: int
    vec: int
    items: int  # 0: streamed

    def params(self) -> dict:
        return {"TPR": self.tpr, "ROWS": self.rows_per_block, "VEC": self.vec, "ITEMS": self.items}

    def block(self) -> tuple[int, int]:
        return (self.tpr, self.rows_per_block)

    def blocks_for(self, rows: int) -> int:
        return max(1, min(-(-rows // self.rows_per_block), 2**31 - 1))


def vector_width(d: int, tensors, elem_size: int) -> int:
    vec = max(1, 16 // elem_size)
    while vec > 1 and (d % vec or any(t.data_ptr() % (vec * t.element_size()) for t in tensors)):
        vec //= 2
    return vec


def geometry(d: int, tensors, *, max_per_thread: int, vectors_per_thread: int = 4) -> RowGeometry:
    """The geometry for rows of length d of these tensors (all with the rows' element type): TPR
    grows until each thread has at most `vectors_per_thread` vectors (ops tune it: on the H200, rows of
    4096 float32 ran softmax best at 2, layer_norm at 8, and the others at 4)."""
    elem = tensors[0].element_size()
    vec = vector_width(d, tensors, elem)
    n_vec = max(1, d // vec)
    tpr = 32
    while tpr < 1024 and tpr * vectors_per_thread < n_vec:
        tpr *= 2
    items = -(-n_vec // tpr)
    if items * vec > max_per_thread:
        items = 0
    rows_per_block = max(1, 256 // tpr)
    return RowGeometry(tpr, rows_per_block, vec, items)


_admitted: dict[tuple[str, int], int] = {}


def specialized_d(kernel: str, d: int) -> int:
    """d for the kernel's D template parameter, or 0 (generic variant) past KJIT_MAX_SPECIALIZATIONS."""
    key = (kernel, d)
    v = _admitted.get(key)
    if v is None:
        v = _admitted[key] = registry.admit(kernel, "D", d)
    return v


def forget_admissions() -> None:
    """Drops the memo of specialized_d (after kjit._C.reset_shape_policy())."""
    _admitted.clear()


def as_rows(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """x made contiguous, its number of rows and the row length (the last dim)."""
    x = x.contiguous()
    d = x.shape[-1] if x.dim() else 1
    rows = x.numel() // d if d else 0
    return x, rows, d
