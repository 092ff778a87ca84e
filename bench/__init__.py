"""kjit.bench: one command that benchmarks kjit against its peers on the current GPU.

    python -m kjit.bench [--quick] [--out DIR] [--only overhead,first_call,bandwidth,recompile,small,matmul,sequence,library_headers]
    python -m kjit.bench --report FILE.json [--out DIR]     # re-render saved results, no GPU needed

Sections (one module each): overhead (CPU cost per cached call), first_call (empty and warm disk cache),
bandwidth (GB/s of the kernel library over a size sweep, plus the reference table), recompile (what a
changing scalar costs), small (time per call of the library ops at small and medium sizes against
eager PyTorch and torch.compile, with the targets of DESIGN section 8), matmul (TFLOP/s of kjit.ops.linear
and kjit.ops.linear_swiglu in bf16 against cuBLAS, eager and torch.compile at LLM shapes, linear's backward, and the compile
time of their first calls, with their targets), sequence (causal_conv1d and linear_scan against eager, torch.compile,
the Python loop and a copy of the same bytes, with their targets), library_headers (compiles of kernels
on CUB, thrust, libcu++ and CuTe, NVRTC's precompiled header off and on; compile-only, it also runs without
a GPU, for sm_90). stats holds the timing helpers,
machine the description of the machine and of the peers, report the JSON / Markdown output, plots the
PNG figures (matplotlib, optional).

Benchmarks are not tests: they run on the GPU machine and compare ratios measured in the same run.
"""

SECTIONS = ("overhead", "first_call", "bandwidth", "recompile", "small", "matmul", "sequence", "library_headers")
# Sections that compile without launching: `--only` with these alone runs on a machine without a GPU.
COMPILE_ONLY = ("library_headers",)
