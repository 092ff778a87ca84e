"""A Hugging Face Llama model with kjit kernels in place of its RMSNorm and its MLP activation.

    python examples/llama_kjit.py                       # checks, graph breaks, timings (CUDA, bf16 + fp32)
    python examples/llama_kjit.py --no-timing           # checks and graph breaks only
    python examples/llama_kjit.py --json llama.json     # also writes every figure to a JSON file

A small Llama (transformers' LlamaConfig / LlamaForCausalLM, random weights from torch.manual_seed;
nothing is downloaded) is patched in a deep copy:
- every LlamaRMSNorm runs kjit.ops.rms_norm(x, weight, eps): one kernel, with backward;
- every LlamaMLP runs down_proj(silu_mul(gate_proj(x), up_proj(x))), where silu_mul is the one fused
  kjit.elementwise function "silu(a) * b" (eager PyTorch runs two kernels there).
The modules keep their parameters and names (their class is swapped for a subclass whose forward calls
kjit), so state_dict, optimizers and checkpoints do not change.

Then, on the CUDA device:
1. the logits of the patched model match the unpatched one's, in bfloat16 and in float32;
2. after loss.backward() on both, every parameter of the patched model has a gradient, matching the
   unpatched model's (a parameter without one is a failure);
3. torch._dynamo.explain(patched model)(input_ids) finds 0 graph breaks (the unpatched model's count is
   printed beside it for reference);
4. (unless --no-timing) the time per forward (torch.no_grad, bf16, median) at 1x1 and 8x512 tokens:
   unpatched vs patched, eager and torch.compile. Targets: patched eager >= 1.0x the unpatched speed,
   patched torch.compile >= 0.9x the compiled unpatched. Timing misses are reported, never fatal.
Exit status: 0, or 1 when a correctness or graph-break check fails, 2 without a usable device or
transformers. Works with transformers 4.4x to 5.x (it relies only on LlamaRMSNorm's weight and
variance_epsilon and LlamaMLP's gate_proj, up_proj, down_proj and act_fn).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# Tolerances of the checks, by dtype. Logits: assert_close(rtol, atol). Gradients: rtol, and atol as a
# fraction of the largest |gradient| of that parameter (gradients of different parameters differ in scale
# by orders of magnitude; bf16 rounds each of them to 8 bits).
LOGIT_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}
GRAD_TOL = {torch.float32: dict(rtol=1e-3, atol_frac=1e-3), torch.bfloat16: dict(rtol=1e-1, atol_frac=5e-2)}
TARGETS = {"eager": 1.0, "torch.compile": 0.9}  # patched speed / unpatched speed, at least


# -- patching --------------------------------------------------------------------------------------------
_SILU_MUL = None


def silu_mul():
    """The fused activation of the MLP: one kjit.elementwise kernel computing silu(a) * b."""
    global _SILU_MUL
    if _SILU_MUL is None:
        import kjit

        _SILU_MUL = kjit.elementwise("silu(a) * b", "a, b", name="silu_mul")
    return _SILU_MUL


def _rms_norm_forward(self, hidden_states):
    import kjit

    w = self.weight if self.weight.dtype == hidden_states.dtype else self.weight.to(hidden_states.dtype)
    return kjit.ops.rms_norm(hidden_states, w, self.variance_epsilon)


def _mlp_forward(self, x):
    return self.down_proj(silu_mul()(self.gate_proj(x), self.up_proj(x)))


_SUBCLASSES: dict = {}


def _swap_forward(module, forward) -> None:
    """Gives this one module a forward calling kjit: its class becomes a subclass of its own class with
    that forward (same parameters, buffers, names and isinstance; other instances are untouched)."""
    cls = type(module)
    sub = _SUBCLASSES.get((cls, forward))
    if sub is None:
        sub = type(f"Kjit{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__,
                                                   "__doc__": f"{cls.__name__} running kjit kernels."})
        _SUBCLASSES[(cls, forward)] = sub
    module.__class__ = sub


def _is_silu(act) -> bool:
    probe = torch.linspace(-6.0, 6.0, 25)
    try:
        return torch.allclose(act(probe), F.silu(probe), rtol=1e-6, atol=1e-6)
    except Exception:  # noqa: BLE001
        return False


def patch_llama(model) -> dict:
    """Patches every LlamaRMSNorm and LlamaMLP of `model` in place; returns how many of each. Raises
    ValueError for an MLP whose activation is not SiLU (silu_mul would change the model)."""
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    norms = mlps = 0
    for name, m in model.named_modules():
        if type(m) is LlamaRMSNorm:
            _swap_forward(m, _rms_norm_forward)
            norms += 1
        elif type(m) is LlamaMLP:
            if not _is_silu(m.act_fn):
                raise ValueError(f"{name}: the MLP's activation is {type(m.act_fn).__name__}, not SiLU; "
                                 "silu_mul computes silu(gate) * up only")
            if getattr(getattr(m, "config", None), "pretraining_tp", 1) != 1:
                raise ValueError(f"{name}: pretraining_tp > 1 splits the MLP; patch models with pretraining_tp=1")
            _swap_forward(m, _mlp_forward)
            mlps += 1
    return {"rms_norm": norms, "mlp": mlps}


def unpatched_left(model) -> list[str]:
    """Names of LlamaRMSNorm / LlamaMLP modules that still run their original forward."""
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    return [n for n, m in model.named_modules() if type(m) in (LlamaRMSNorm, LlamaMLP)]


# -- the model -------------------------------------------------------------------------------------------
def build_base(args):
    """The unpatched model in float32 on the CPU, random weights from args.seed. Its RMSNorm weights are
    drawn around 1 (a fresh model has them all 1, which would hide a kernel that ignores them)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads or args.heads, max_position_embeddings=args.max_positions,
                         hidden_act="silu", rms_norm_eps=1e-6, use_cache=False, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval()
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LlamaRMSNorm):
                m.weight.copy_(1.0 + 0.2 * torch.randn_like(m.weight))
    return model


def model_pair(base, dtype, device):
    """(unpatched, patched): copies of `base` in `dtype` on `device`, the second patched with kjit."""
    ref = copy.deepcopy(base).to(device=device, dtype=dtype)
    patched = copy.deepcopy(ref)
    counts = patch_llama(patched)
    return ref, patched, counts


def _tokens(shape: tuple, vocab: int, device, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g).to(device)


# -- checks ----------------------------------------------------------------------------------------------
def _diff(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def check_correctness(base, dtype, device, batch: int, seq: int, vocab: int, seed: int) -> dict:
    """Logits and gradients of the patched model against the unpatched one; {"failures": [...], ...}."""
    name = str(dtype).replace("torch.", "")
    out: dict = {"dtype": name, "tokens": [batch, seq], "failures": []}
    fail = out["failures"].append
    ref, patched, counts = model_pair(base, dtype, device)
    out["patched_modules"] = counts
    left = unpatched_left(patched)
    if left or not counts["rms_norm"] or not counts["mlp"]:
        fail(f"{name}: patching left {left or 'nothing patched'} (patched {counts})")
    ids = _tokens((batch, seq), vocab, device, seed)

    # Logits (no grad), then loss.backward() on both.
    with torch.no_grad():
        want, got = ref(input_ids=ids).logits, patched(input_ids=ids).logits
    out["logits_max_abs_diff"] = _diff(got, want)
    try:
        torch.testing.assert_close(got.float(), want.float(), **LOGIT_TOL[dtype])
    except AssertionError as e:
        fail(f"{name}: logits differ: {str(e).splitlines()[0]} (max abs diff {out['logits_max_abs_diff']:.3g})")
    try:
        ref_loss = ref(input_ids=ids, labels=ids).loss
        loss = patched(input_ids=ids, labels=ids).loss
        ref_loss.backward()
        loss.backward()
    except Exception as e:  # noqa: BLE001  (a backward that raises is a failure to report, not a crash)
        fail(f"{name}: loss.backward() failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return out
    out["loss"] = {"unpatched": ref_loss.item(), "patched": loss.item()}
    tol = GRAD_TOL[dtype]
    worst = (0.0, None)
    ref_params = dict(ref.named_parameters())
    missing, wrong = [], []
    for pname, p in patched.named_parameters():
        r = ref_params[pname]
        if p.grad is None:
            missing.append(pname)
            continue
        if r.grad is None:
            continue  # no gradient in the unpatched model either (unused parameter)
        scale = r.grad.abs().max().item()
        d = _diff(p.grad, r.grad)
        if scale and d / scale > worst[0]:
            worst = (d / scale, pname)
        try:
            torch.testing.assert_close(p.grad.float(), r.grad.float(), rtol=tol["rtol"],
                                       atol=tol["atol_frac"] * scale + 1e-12)
        except AssertionError as e:
            wrong.append(f"{pname} ({str(e).splitlines()[0]}; max abs diff {d:.3g}, max |grad| {scale:.3g})")
    out["params"] = len(ref_params)
    out["grad_worst_rel_diff"] = {"value": worst[0], "param": worst[1]}
    if missing:
        fail(f"{name}: {len(missing)} parameters have no gradient in the patched model: {', '.join(missing)}")
    for w in wrong:
        fail(f"{name}: gradient differs: {w}")
    return out


def graph_breaks(model, ids) -> dict:
    """torch._dynamo.explain's graph count, graph-break count and reasons for model(ids)."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            ex = torch._dynamo.explain(model)(ids)
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    finally:
        torch._dynamo.reset()
    reasons: dict[str, int] = {}  # one line per distinct reason and place, with how often it occurs
    for r in getattr(ex, "break_reasons", []) or []:
        frame = r.user_stack[-1] if getattr(r, "user_stack", None) else None
        where = f" at {frame.filename}:{frame.lineno}" if frame is not None else ""
        lines = [ln.strip() for ln in str(r.reason).splitlines() if ln.strip()]
        text = (lines[0] if lines else "?") + "".join(f" ({ln})" for ln in lines[1:2] if ln.startswith("Explanation"))
        reasons[text + where] = reasons.get(text + where, 0) + 1
    return {"graphs": ex.graph_count, "graph_breaks": ex.graph_break_count,
            "reasons": [k + (f" [{n} times]" if n > 1 else "") for k, n in reasons.items()]}


# -- timing ----------------------------------------------------------------------------------------------
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forwards(fns: dict, device, iters: int, warmup: int) -> dict:
    """ms per forward of each zero-argument function: synchronize, perf_counter, one forward, synchronize;
    the functions take turns, `iters` rounds after `warmup` calls each. {name: {median_ms, min_ms, max_ms,
    n}}."""
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        _sync(device)
        samples: dict = {n: [] for n in fns}
        for _ in range(iters):
            for n, fn in fns.items():
                _sync(device)
                t = time.perf_counter()
                fn()
                _sync(device)
                samples[n].append((time.perf_counter() - t) * 1e3)
    return {n: {"median_ms": statistics.median(s), "min_ms": min(s), "max_ms": max(s), "n": len(s)}
            for n, s in samples.items()}


def run_timing(base, device, shapes: list[tuple], vocab: int, seed: int, iters: int, warmup: int,
               compile_: bool, log) -> dict:
    import torch._dynamo

    ref, patched, _ = model_pair(base, torch.bfloat16, device)
    models = {"unpatched eager": ref, "kjit eager": patched}
    if compile_:
        torch._dynamo.reset()
        models["unpatched torch.compile"] = torch.compile(ref, dynamic=False)
        models["kjit torch.compile"] = torch.compile(patched, dynamic=False)
    out: dict = {"dtype": "bfloat16", "iters": iters, "warmup": warmup, "shapes": {}}
    for shape in shapes:
        ids = _tokens(shape, vocab, device, seed)
        key = "x".join(map(str, shape))
        errors, fns = {}, {}
        for name, m in models.items():
            t = time.perf_counter()
            try:
                with torch.no_grad():
                    m(input_ids=ids)  # compiles the torch.compile'd models for this shape
                _sync(device)
            except Exception as e:  # noqa: BLE001  (a model that cannot run is reported, timing goes on)
                errors[name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                continue
            if "compile" in name:
                log(f"  compiled {name} for {key} tokens in {time.perf_counter() - t:.1f} s")
            fns[name] = (lambda m=m: m(input_ids=ids))
        res = time_forwards(fns, device, iters, warmup)
        row = {"ms": res, "errors": errors, "speedup": {}}
        for kind in ("eager", "torch.compile"):
            u, k = res.get(f"unpatched {kind}"), res.get(f"kjit {kind}")
            if u and k:
                row["speedup"][kind] = u["median_ms"] / k["median_ms"]
        out["shapes"][key] = row
    torch._dynamo.reset()
    return out


def timing_table(t: dict) -> str:
    shapes = list(t["shapes"])
    names = ["unpatched eager", "kjit eager", "unpatched torch.compile", "kjit torch.compile"]
    rows = []
    for n in names:
        cells = []
        for s in shapes:
            row = t["shapes"][s]
            v = row["ms"].get(n)
            cells.append(f"{v['median_ms']:.3f}" if v else ("error" if n in row["errors"] else "-"))
        rows.append((n, cells))
    for kind, target in TARGETS.items():
        cells = []
        for s in shapes:
            r = t["shapes"][s]["speedup"].get(kind)
            cells.append("-" if r is None else f"{r:.2f}x" + ("" if r >= target else " (miss)"))
        rows.append((f"speed kjit / unpatched, {kind} (target >= {target}x)", cells))
    title = f"ms per forward ({t['dtype']}, torch.no_grad, median of {t['iters']})"
    w = max(len(title), *(len(label) for label, _ in rows)) + 2
    lines = [title.ljust(w) + "".join(f"{s + ' tokens':>16}" for s in shapes)]
    lines += [label.ljust(w) + "".join(f"{c:>16}" for c in cells) for label, cells in rows]
    for s in shapes:
        for n, e in t["shapes"][s]["errors"].items():
            lines.append(f"  {s}: {n} failed: {e}")
    return "\n".join(lines)


def timing_misses(t: dict) -> list[str]:
    return [f"{kind} at {s} tokens: {r:.2f}x (target >= {TARGETS[kind]}x)" for s, row in t["shapes"].items()
            for kind, r in row["speedup"].items() if r < TARGETS[kind]]


# -- main ------------------------------------------------------------------------------------------------
def _shape(text: str) -> tuple:
    try:
        b, s = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BATCHxSEQ such as 8x512, got {text!r}") from None
    if b < 1 or s < 1:
        raise argparse.ArgumentTypeError(f"batch and sequence length must be >= 1, got {text!r}")
    return (b, s)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="A small Hugging Face Llama with kjit's rms_norm and a fused "
                                             "silu(a) * b: correctness, graph breaks and timings.")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1408)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--check-tokens", type=_shape, default=(2, 64), metavar="BxS",
                    help="batch x sequence length of the correctness and graph-break checks (default 2x64)")
    ap.add_argument("--shapes", default="1x1,8x512", help="batch x sequence lengths to time (default 1x1,8x512)")
    ap.add_argument("--iters", type=int, default=30, help="timed forwards per model and shape (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-timing", action="store_true", help="correctness and graph breaks only")
    ap.add_argument("--no-compile", action="store_true", help="time eager only (no torch.compile)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write every figure to this JSON file")
    return ap


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        shapes = [_shape(s) for s in args.shapes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--shapes: {e}")

    def log(msg: str) -> None:
        print(msg, flush=True)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}); kjit needs one",
              file=sys.stderr)
        return 2
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    try:
        import transformers
    except ImportError as e:
        print(f"transformers is not installed ({e}): pip install transformers", file=sys.stderr)
        return 2
    import kjit

    result: dict = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                 "kjit": kjit.__version__, "cuda": torch.version.cuda,
                                 "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
                    "model": {k: getattr(args, k) for k in ("hidden", "intermediate", "layers", "heads", "kv_heads",
                                                            "vocab", "seed")}}
    log(f"llama_kjit: torch {torch.__version__}, transformers {transformers.__version__}, kjit {kjit.__version__}"
        + (f", {result['versions']['gpu']}" if result["versions"]["gpu"] else f", {device}"))
    base = build_base(args)
    log(f"model: {args.layers} layers, hidden {args.hidden}, intermediate {args.intermediate}, {args.heads} heads, "
        f"vocab {args.vocab}: {sum(p.numel() for p in base.parameters()) / 1e6:.1f} M parameters")

    failures: list[str] = []
    result["correctness"] = []
    b, s = args.check_tokens
    for dtype in (torch.bfloat16, torch.float32):
        c = check_correctness(base, dtype, device, b, s, args.vocab, args.seed)
        result["correctness"].append(c)
        failures += c["failures"]
        worst = c.get("grad_worst_rel_diff") or {}
        log(f"correctness {c['dtype']} ({b}x{s} tokens): patched {c['patched_modules']}, logits max abs diff "
            f"{c['logits_max_abs_diff']:.3g}" + (f", worst gradient diff {worst['value']:.3g} of max |grad| "
                                                 f"({worst['param']})" if worst.get("param") else "")
            + (": ok" if not c["failures"] else f": {len(c['failures'])} failure(s)"))

    ids = _tokens((b, s), args.vocab, device, args.seed)
    ref, patched, _ = model_pair(base, torch.bfloat16, device)
    gb = {"unpatched": graph_breaks(ref, ids), "patched": graph_breaks(patched, ids)}
    del ref, patched
    result["graph_breaks"] = gb
    for which in ("unpatched", "patched"):
        g = gb[which]
        if "error" in g:
            log(f"graph breaks ({which}): torch._dynamo.explain failed: {g['error']}")
        else:
            log(f"graph breaks ({which}): {g['graph_breaks']} ({g['graphs']} graph(s))")
            for r in g["reasons"]:
                log(f"  - {r}")
    if "error" in gb["patched"]:
        failures.append(f"torch._dynamo.explain of the patched model failed: {gb['patched']['error']}")
    elif gb["patched"]["graph_breaks"]:
        failures.append(f"the patched model has {gb['patched']['graph_breaks']} graph break(s): "
                        + "; ".join(gb["patched"]["reasons"]))

    if not args.no_timing:
        t = run_timing(base, device, shapes, args.vocab, args.seed, args.iters, args.warmup, not args.no_compile, log)
        result["timing"] = t
        result["timing_misses"] = timing_misses(t)
        log(timing_table(t))
        for m in result["timing_misses"]:
            log(f"timing target missed: {m}")

    result["failures"] = failures
    result["ok"] = not failures
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        log(f"wrote {args.json}")
    for msg in failures:
        print(f"FAIL: {msg}", file=sys.stderr)
    log("llama_kjit: " + ("all checks passed" if not failures else f"{len(failures)} check(s) failed"))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
