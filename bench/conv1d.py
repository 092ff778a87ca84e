"""kjit.ops.conv1d and conv_transpose1d against PyTorch's (cuDNN's) F.conv1d / F.conv_transpose1d at the
diffusion policy U-Net's shapes (issue 43: horizon 16, channels 256 / 512 / 1024, kernel 5; its Downsample1d
and Upsample1d), batch 1 and 64, bfloat16 and float32 (TF32 on both sides: PyTorch's convolution default).

Time per call on the GPU with the CPU out of the way: 20 calls captured in one CUDA graph, the graph replayed
(bench/stats.gpu_ms around replays), divided by 20; each contender is checked against F.conv1d in float64
once before timing. Beside each figure, the floor of reading the weight once at the GPU's HBM bandwidth
(what a batch of one cannot beat). Writes JSON and Markdown.

    python -m kjit.bench.conv1d [--out DIR] [--quick]
"""

from __future__ import annotations

import functools
import json

from . import machine, report, stats

CALLS = 20  # per graph
# (name, op, C, O, KW, L, kwargs)
SHAPES = [
    ("block 256", "conv1d", 256, 256, 5, 16, dict(padding=2)),
    ("block 512", "conv1d", 512, 512, 5, 8, dict(padding=2)),
    ("block 1024", "conv1d", 1024, 1024, 5, 4, dict(padding=2)),
    ("up block 2048->512", "conv1d", 2048, 512, 5, 4, dict(padding=2)),
    ("residual 1x1 256->512", "conv1d", 256, 512, 1, 8, {}),
    ("downsample 512", "conv1d", 512, 512, 3, 8, dict(stride=2, padding=1)),
    ("upsample 512", "conv_transpose1d", 512, 512, 4, 4, dict(stride=2, padding=1)),
]
BATCHES = (1, 64)
DTYPES = ("bfloat16", "float32")
HBM_GBPS = 4800.0  # H200


def run(quick: bool = False) -> dict:
    import torch
    import torch.nn.functional as F

    from kjit import ops

    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    points = []
    for dname in DTYPES:
        dtype = getattr(torch, dname)
        for batch in BATCHES:
            for name, op, c, o, kw, length, kwargs in SHAPES:
                transposed = op == "conv_transpose1d"
                x = torch.randn(batch, c, length, device="cuda", dtype=dtype)
                w = (torch.randn(c, o, kw) if transposed else torch.randn(o, c, kw)).to("cuda", dtype) / (c * kw) ** 0.5
                b = torch.randn(o, device="cuda", dtype=dtype)
                peer = F.conv_transpose1d if transposed else F.conv1d
                mine = getattr(ops, op)
                want = peer(x.double(), w.double(), b.double(), **kwargs)
                got = mine(x, w, b, **kwargs)
                err = ((got.double() - want).abs().max() / want.abs().max()).item()
                t_kjit = stats.graph_call_ms(functools.partial(mine, x, w, b, **kwargs), CALLS, quick)
                t_peer = stats.graph_call_ms(functools.partial(peer, x, w, b, **kwargs), CALLS, quick)
                floor_ms = w.numel() * w.element_size() / (HBM_GBPS * 1e6)
                points.append(
                    dict(
                        shape=name,
                        op=op,
                        dtype=dname,
                        batch=batch,
                        x=list(x.shape),
                        weight=list(w.shape),
                        kwargs=kwargs,
                        kjit_us=round(t_kjit * 1e3, 2),
                        cudnn_us=round(t_peer * 1e3, 2),
                        speedup=round(t_peer / t_kjit, 3),
                        weight_floor_us=round(floor_ms * 1e3, 2),
                        max_rel_err=err,
                    )
                )
                print(json.dumps(points[-1]), flush=True)
    return dict(machine=machine.record(), date=machine.today(), calls_per_graph=CALLS, points=points)


def markdown(res: dict) -> str:
    gpu = res["machine"].get("gpu") or "?"
    out = [
        f"# conv1d / conv_transpose1d vs cuDNN, {gpu}, {res['date']}",
        "",
        f"GPU time per call ({res['calls_per_graph']} calls in one CUDA graph, replayed); weight floor = the weight "
        "read once at HBM bandwidth.",
        "",
        "| shape | dtype | batch | kjit us | cuDNN us | kjit speedup | weight floor us | max rel err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in res["points"]:
        out.append(
            f"| {p['shape']} | {p['dtype']} | {p['batch']} | {p['kjit_us']} | {p['cudnn_us']} | {p['speedup']:.2f}x "
            f"| {p['weight_floor_us']} | {p['max_rel_err']:.1e} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    return report.standalone_main(argv, __doc__, "conv1d", run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
