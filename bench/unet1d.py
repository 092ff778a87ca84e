"""The diffusion policy's 1-D U-Net (examples/diffusion_policy_kjit.py, issue 43) per forward, and its
Conv1dBlock (Conv1d -> GroupNorm(8) -> Mish) alone, kjit against PyTorch in the same run.

U-Net: horizon 16, float32 (TF32 on both sides: PyTorch's convolution default) and bfloat16, batch 1, 8 and
64; per forward in eager, eager in one CUDA graph, torch.compile (default, reduce-overhead), kjit eager and
kjit in one CUDA graph (the example's own timing: mean over 20 calls or replays after warm-up), each checked
against the reference (outputs and every gradient) first. Block: 20 blocks in one CUDA graph, replayed
(stats.gpu_ms), divided by 20; kjit's conv1d + group_norm(mish) against nn.Conv1d + nn.GroupNorm + F.mish.
Beside every figure the floor of reading the weights once at HBM bandwidth, and the issue's targets: at batch
1 kjit in one graph >= 3x both reduce-overhead and eager-in-a-graph, at batch 64 >= 2x both; each block >= 1.5x
eager's block in a graph. Writes JSON and Markdown.

    python -m kjit.bench.unet1d [--out DIR] [--quick]     (from the root of the source tree: it runs the example)
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from . import machine, report, stats

CALLS = 20  # blocks per graph
HBM_GBPS = 4800.0  # H200
BATCHES = (1, 8, 64)
DTYPES = ("float32", "bfloat16")
# (name, cin, cout, kernel, horizon): the U-Net's blocks at horizon 16 (its levels run at 16, 8 and 4).
BLOCKS = [
    ("block 256", 256, 256, 5, 16),
    ("block 512", 512, 512, 5, 8),
    ("block 1024", 1024, 1024, 5, 4),
    ("up block 2048->512", 2048, 512, 5, 8),
]
# kjit in one graph against each peer: at least this many times faster (issue 43), by batch.
TARGETS = {1: 3.0, 64: 2.0}
BLOCK_TARGET = 1.5
PEERS = ("eager in one CUDA graph", "torch.compile reduce-overhead")


def _example():
    """examples/diffusion_policy_kjit.py, from the source tree this file is in or the current directory (the
    installed kjit.bench has no examples/)."""
    name = os.path.join("examples", "diffusion_policy_kjit.py")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [p for p in (os.path.join(here, name), os.path.abspath(name)) if os.path.isfile(p)]
    if not found:
        raise SystemExit(f"bench.unet1d needs {name}: run it from the root of kjit's source tree")
    path = found[0]
    spec = importlib.util.spec_from_file_location("diffusion_policy_kjit", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def blocks(ex, quick: bool) -> list[dict]:
    import torch

    points = []
    for dname in DTYPES:
        dtype = getattr(torch, dname)
        for batch in (1, 64):
            for name, cin, cout, k, length in BLOCKS:
                block = ex.Conv1dBlock(cin, cout, k).to("cuda", dtype).requires_grad_(False)
                x = torch.randn(batch, cin, length, device="cuda", dtype=dtype)
                want = block(x)
                got = block.kjit(x)
                err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
                t_kjit = stats.graph_call_ms(lambda block=block, x=x: block.kjit(x), CALLS, quick)
                t_eager = stats.graph_call_ms(lambda block=block, x=x: block(x), CALLS, quick)
                w = block.conv.weight
                points.append(
                    dict(
                        block=name,
                        dtype=dname,
                        batch=batch,
                        kjit_us=round(t_kjit * 1e3, 2),
                        eager_graph_us=round(t_eager * 1e3, 2),
                        speedup=round(t_eager / t_kjit, 3),
                        target=BLOCK_TARGET,
                        weight_floor_us=round(w.numel() * w.element_size() / (HBM_GBPS * 1e3), 2),
                        max_rel_err_vs_eager=err,
                    )
                )
                print(json.dumps(points[-1]), flush=True)
    return points


def unets(ex, quick: bool) -> list[dict]:
    points = []
    for dname in DTYPES:
        for batch in (1, 64) if quick else BATCHES:
            r = ex.main(["--batch", str(batch), "--dtype", dname])
            kj = r["forward_ms"]["kjit in one CUDA graph"]
            r["floor_ms"] = r.pop("weights_over_bandwidth_ms")
            r["target"] = TARGETS.get(batch)
            r["vs"] = {p: round(r["forward_ms"][p] / kj, 3) for p in PEERS if p in r["forward_ms"]}
            points.append(r)
    return points


def run(quick: bool = False) -> dict:
    ex = _example()
    return dict(machine=machine.record(), date=machine.today(), unet=unets(ex, quick), blocks=blocks(ex, quick))


def _met(ratio: float, target: float | None) -> str:
    if target is None:
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x ({'met' if ratio >= target else f'miss, target {target:g}x'})"


def markdown(res: dict) -> str:
    gpu = res["machine"].get("gpu") or "?"
    modes = (
        "eager",
        "eager in one CUDA graph",
        "torch.compile",
        "torch.compile reduce-overhead",
        "kjit eager",
        "kjit in one CUDA graph",
    )
    out = [
        f"# The diffusion policy's 1-D U-Net (72.6M parameters, horizon 16) on kjit, {gpu}, {res['date']}",
        "",
        "Per forward, ms (mean of 20 calls or graph replays); floor = every weight read once at HBM bandwidth; "
        "the last two columns are kjit in one CUDA graph against each peer, with the issue's target.",
        "",
        "| dtype | batch | " + " | ".join(modes) + " | floor | vs eager in a graph | vs reduce-overhead |",
        "|---|---|" + "---|" * len(modes) + "---|---|---|",
    ]
    for r in res["unet"]:
        ms = r["forward_ms"]
        cells = " | ".join(f"{ms[m]:.3f}" if m in ms else "-" for m in modes)
        vs = " | ".join(_met(r["vs"][p], r["target"]) for p in PEERS)
        out.append(f"| {r['dtype']} | {r['batch']} | {cells} | {r['floor_ms']:.3f} | {vs} |")
    out += [
        "",
        f"Conv1dBlock (Conv1d -> GroupNorm(8) -> Mish): GPU time per block, {CALLS} blocks in one CUDA graph, "
        "replayed; kjit = conv1d + group_norm with the Mish fused.",
        "",
        "| block | dtype | batch | kjit us | eager in a graph us | speedup | weight floor us | max rel err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in res["blocks"]:
        out.append(
            f"| {p['block']} | {p['dtype']} | {p['batch']} | {p['kjit_us']} | {p['eager_graph_us']} "
            f"| {_met(p['speedup'], p['target'])} | {p['weight_floor_us']} | {p['max_rel_err_vs_eager']:.1e} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    return report.standalone_main(argv, __doc__, "unet1d", run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
