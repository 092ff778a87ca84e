"""A Hugging Face Llama with kjit kernels in place of its RMSNorms, its MLPs and its residual adds.

    python examples/llama_kjit.py                       # checks, graph breaks, kernel counts, timings (CUDA)
    python examples/llama_kjit.py --no-timing           # checks and graph breaks only
    python examples/llama_kjit.py --mlp silu_mul        # the MLP of before: cuBLAS GEMMs, one fused activation
    python examples/llama_kjit.py --json llama.json     # also writes every figure to a JSON file

A small Llama (transformers' LlamaConfig / LlamaForCausalLM, random weights from torch.manual_seed;
nothing is downloaded) is patched in a deep copy:
- every LlamaRMSNorm runs kjit.ops.rms_norm(x, weight, eps): one kernel, with backward;
- every LlamaMLP (--mlp swiglu, the default) runs kjit.ops.linear_swiglu(x, w_gate_up), silu(x @ w_gate.T) *
  (x @ w_up.T) in one GEMM kernel, then kjit.ops.linear(h, down_proj.weight, residual=...) with the
  decoder layer's residual add fused into the GEMM's epilogue. w_gate_up is [2F, K] = cat(gate_proj.weight,
  up_proj.weight); at patch time the two weights become the two halves of one tensor (gate_proj.weight
  and up_proj.weight stay the model's parameters, with their names, now views of that tensor), so no
  forward copies them: _GateUp hands linear_swiglu the whole tensor and splits its gradient back into
  gate_proj.weight.grad and up_proj.weight.grad, exactly what torch.cat's backward would give. (A
  torch.cat([gate, up]) in every forward is as exact but copies 2 F K weights per call, which costs more
  than the fusion saves at decode; one fused parameter instead of the two would change the parameters'
  names, state_dict and checkpoints.) The halves stay one tensor through in-place updates (optimizers,
  load_state_dict), .to() / .cuda() / .half() (_apply joins them again) and deepcopy / pickle
  (__setstate__ does); an eager forward that finds them apart (after `param.data = ...` or
  load_state_dict(assign=True)) falls back to torch.cat; torch.compile traces the fused path without that
  check (a data pointer cannot be traced), so call refuse_gate_up(mlp) after such a replacement.
  --mlp silu_mul: down_proj(silu_mul(gate_proj(x), up_proj(x))) with silu_mul the one fused
  kjit.elementwise function "silu(a) * b" (the example's MLP before the matrix ops);
- every LlamaDecoderLayer (--mlp swiglu, where its forward has the structure this relies on:
  decoder_layer_fusable()) adds the attention output to the residual and normalizes in one kernel,
  kjit.ops.add_rms_norm(attn_out, residual, post_attention_layernorm.weight) -> (normed, sum), and hands
  the sum to the MLP as the residual of down_proj: the layer's two residual adds and its second norm run
  in kernels that were there anyway.
The modules keep their parameters and names (their class is swapped for a subclass whose forward calls
kjit), so state_dict, optimizers (created after patching) and checkpoints do not change.

Then, on the CUDA device:
1. the logits of the patched model match the unpatched one's, in bfloat16 and in float32;
2. after loss.backward() on both, every parameter of the patched model has a gradient, matching the
   unpatched model's (a parameter without one is a failure);
3. torch._dynamo.explain(patched model)(input_ids) finds 0 graph breaks (the unpatched model's count is
   printed beside it for reference);
4. (unless --no-timing) CUDA kernels launched per forward (torch.profiler: the CUDA kernel events of a few
   forwards, memcpy / memset left out) and the time per forward (torch.no_grad, bf16, median) at 1x1 and
   8x512 tokens: unpatched vs patched, eager and torch.compile. Targets: patched eager >= 1.1x the
   unpatched speed, patched torch.compile >= 1.0x the compiled unpatched. Timing misses are reported,
   never fatal.
Exit status: 0, or 1 when a correctness or graph-break check fails, 2 without a usable device or
transformers. Works with transformers 4.4x to 5.x (it relies only on LlamaRMSNorm's weight and
variance_epsilon, LlamaMLP's gate_proj, up_proj, down_proj and act_fn, and, for the decoder layer, its
input_layernorm, self_attn, post_attention_layernorm and mlp, called as its forward's source shows).
"""

from __future__ import annotations

import argparse
import copy
import inspect
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
TARGETS = {"eager": 1.1, "torch.compile": 1.0}  # patched speed / unpatched speed, at least
MLP_MODES = ("swiglu", "silu_mul")


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


def _mlp_silu_mul_forward(self, x):
    return self.down_proj(silu_mul()(self.gate_proj(x), self.up_proj(x)))


class _GateUp(torch.autograd.Function):
    """w_gate_up [2F, K] for linear_swiglu, from gate_proj.weight and up_proj.weight when they are its two
    halves (fuse_gate_up): the forward returns the whole tensor (no copy), the backward splits its
    gradient into the two parameters' gradients (as torch.cat's backward would)."""

    @staticmethod
    def forward(gate, up, fused):
        return fused.view(fused.shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.rows = inputs[0].shape[0]

    @staticmethod
    def backward(ctx, grad):
        return grad[: ctx.rows], grad[ctx.rows :], None


def _halves_of(fused, gate, up) -> bool:
    """Whether gate and up are still the two halves of `fused` (same memory, in that order)."""
    return (
        fused is not None
        and fused.dtype == gate.dtype == up.dtype
        and fused.device == gate.device
        and gate.is_contiguous()
        and up.is_contiguous()
        and fused.shape[0] == gate.shape[0] + up.shape[0]
        and gate.data_ptr() == fused.data_ptr()
        and up.data_ptr() == fused.data_ptr() + gate.numel() * gate.element_size()
    )


def fuse_gate_up(mlp) -> None:
    """Makes mlp.gate_proj.weight and mlp.up_proj.weight the two halves of one [2F, K] tensor, kept as
    mlp._kjit_gate_up (a plain attribute: no parameter, not in state_dict). The Parameter objects stay the
    same (their .data becomes a view), so an optimizer that holds them keeps working."""
    g, u = mlp.gate_proj.weight, mlp.up_proj.weight
    if _halves_of(getattr(mlp, "_kjit_gate_up", None), g, u):
        return
    with torch.no_grad():
        fused = torch.cat([g, u]).detach()
    g.data, u.data = fused[: g.shape[0]], fused[g.shape[0] :]
    mlp._kjit_gate_up = fused


refuse_gate_up = fuse_gate_up  # joins the halves again after something replaced a weight's data


def _gate_up_weight(mlp):
    g, u = mlp.gate_proj.weight, mlp.up_proj.weight
    fused = getattr(mlp, "_kjit_gate_up", None)
    # torch.compile traces the fused path (kept by _apply, deepcopy and in-place updates); eager checks.
    if torch.compiler.is_compiling() or _halves_of(fused, g, u):
        return _GateUp.apply(g, u, fused)
    return torch.cat([g, u])  # the halves came apart (param.data = ...): correct, one copy per call


def _mlp_forward(self, x, residual=None):
    """silu(x @ w_gate.T) * (x @ w_up.T) in one kernel, then down_proj with `residual` (the decoder layer's
    residual stream) added in the GEMM's epilogue."""
    import kjit

    if x.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        # kjit's GEMMs take float32 only as TF32, which this process has not allowed: PyTorch's own float32 matmul.
        h = F.silu(self.gate_proj(x)) * self.up_proj(x)
        out = self.down_proj(h)
        return out if residual is None else out + residual
    h = kjit.ops.linear_swiglu(x, _gate_up_weight(self))
    return kjit.ops.linear(h, self.down_proj.weight, self.down_proj.bias, residual=residual)


def _mlp_apply(self, fn, *args, **kwargs):
    """nn.Module._apply (.to(), .cuda(), .half(), ...) replaces the parameters' data: the gate / up halves
    are joined again after it."""
    out = super(type(self), self)._apply(fn, *args, **kwargs)
    fuse_gate_up(self)
    return out


def _mlp_setstate(self, state):
    """copy.deepcopy and pickle: a Parameter's deepcopy clones its data, so the halves are joined again."""
    super(type(self), self).__setstate__(state)
    fuse_gate_up(self)


def _decoder_forward(self, hidden_states, *args, **kwargs):
    """LlamaDecoderLayer.forward with the residual add after attention and the second norm in one kernel
    (add_rms_norm) and the add after the MLP in down_proj's epilogue. Called with positional arguments
    beyond hidden_states (gradient checkpointing does that), it runs the layer's own forward."""
    import kjit

    if args:
        return super(type(self), self).forward(hidden_states, *args, **kwargs)
    attn = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
    norm = self.post_attention_layernorm
    w = norm.weight if norm.weight.dtype == hidden_states.dtype else norm.weight.to(hidden_states.dtype)
    normed, residual = kjit.ops.add_rms_norm(attn[0], hidden_states, w, norm.variance_epsilon)
    out = self.mlp(normed, residual=residual)
    if not _LAYER_RETURNS_TUPLE:
        return out
    outputs = (out,)  # transformers < 4.54: (hidden_states, [attention weights], [present key / values])
    if kwargs.get("output_attentions"):
        outputs += (attn[1],)
    if kwargs.get("use_cache") and len(attn) > 2:
        outputs += (attn[2],)
    return outputs


_LAYER_RETURNS_TUPLE = False


def decoder_layer_fusable() -> str | None:
    """None when LlamaDecoderLayer.forward has the structure _decoder_forward reproduces (norm, attention,
    residual add, norm, MLP, residual add), else why not; sets whether the layer returns a tuple."""
    global _LAYER_RETURNS_TUPLE
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    try:
        src = inspect.getsource(LlamaDecoderLayer.forward)
    except (OSError, TypeError) as e:
        return f"the source of LlamaDecoderLayer.forward is not available ({e})"
    src = " ".join(src.split())
    needed = (
        "residual = hidden_states",
        "hidden_states = self.input_layernorm(hidden_states)",
        "self.self_attn(",
        "hidden_states = residual + hidden_states",
        "hidden_states = self.post_attention_layernorm(hidden_states)",
        "hidden_states = self.mlp(hidden_states)",
    )
    missing = [n for n in needed if n not in src]
    if missing or src.count("hidden_states = residual + hidden_states") != 2:
        return f"LlamaDecoderLayer.forward differs from the structure this example fuses (missing: {missing})"
    _LAYER_RETURNS_TUPLE = "outputs = (hidden_states,)" in src
    return None


_SUBCLASSES: dict = {}


def _swap_forward(module, forward, **methods) -> None:
    """Gives this one module a forward calling kjit: its class becomes a subclass of its own class with
    that forward (and `methods`; same parameters, buffers, names and isinstance; other instances are
    untouched)."""
    cls = type(module)
    key = (cls, forward, tuple(sorted(methods.items())))
    sub = _SUBCLASSES.get(key)
    if sub is None:
        sub = type(
            f"Kjit{cls.__name__}",
            (cls,),
            {"forward": forward, **methods, "__module__": __name__, "__doc__": f"{cls.__name__} running kjit kernels."},
        )
        _SUBCLASSES[key] = sub
    module.__class__ = sub


def _is_silu(act) -> bool:
    probe = torch.linspace(-6.0, 6.0, 25)
    try:
        return torch.allclose(act(probe), F.silu(probe), rtol=1e-6, atol=1e-6)
    except Exception:  # noqa: BLE001
        return False


def patch_llama(model, mlp: str = "swiglu") -> dict:
    """Patches every LlamaRMSNorm and LlamaMLP of `model` in place, and with mlp="swiglu" every
    LlamaDecoderLayer too where decoder_layer_fusable(); returns how many of each. Raises ValueError for an
    MLP whose activation is not SiLU (the fused kernels would change the model), or with biases (swiglu)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm

    if mlp not in MLP_MODES:
        raise ValueError(f"mlp={mlp!r}: expected one of {MLP_MODES}")
    fuse_layers = mlp == "swiglu" and decoder_layer_fusable() is None
    norms = mlps = layers = 0
    for name, m in model.named_modules():
        if type(m) is LlamaRMSNorm:
            _swap_forward(m, _rms_norm_forward)
            norms += 1
        elif type(m) is LlamaMLP:
            if not _is_silu(m.act_fn):
                raise ValueError(
                    f"{name}: the MLP's activation is {type(m.act_fn).__name__}, not SiLU; "
                    "the fused kernels compute silu(gate) * up only"
                )
            if getattr(getattr(m, "config", None), "pretraining_tp", 1) != 1:
                raise ValueError(f"{name}: pretraining_tp > 1 splits the MLP; patch models with pretraining_tp=1")
            if mlp == "silu_mul":
                _swap_forward(m, _mlp_silu_mul_forward)
            else:
                if m.gate_proj.bias is not None or m.up_proj.bias is not None:
                    raise ValueError(
                        f"{name}: gate_proj / up_proj have biases (mlp_bias), which linear_swiglu "
                        "does not add; use mlp='silu_mul'"
                    )
                fuse_gate_up(m)
                _swap_forward(m, _mlp_forward, _apply=_mlp_apply, __setstate__=_mlp_setstate)
            mlps += 1
        elif type(m) is LlamaDecoderLayer and fuse_layers:
            _swap_forward(m, _decoder_forward)
            layers += 1
    return {"rms_norm": norms, "mlp": mlps, "decoder_layer": layers}


def unpatched_left(model, mlp: str = "swiglu") -> list[str]:
    """Names of LlamaRMSNorm / LlamaMLP modules (and, with mlp="swiglu", LlamaDecoderLayer where
    decoder_layer_fusable()) that still run their original forward."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm

    fused = mlp == "swiglu" and decoder_layer_fusable() is None
    types = (LlamaRMSNorm, LlamaMLP) + ((LlamaDecoderLayer,) if fused else ())
    return [n for n, m in model.named_modules() if type(m) in types]


# -- the model -------------------------------------------------------------------------------------------
def build_base(args):
    """The unpatched model in float32 on the CPU, random weights from args.seed. Its RMSNorm weights are
    drawn around 1 (a fresh model has them all 1, which would hide a kernel that ignores them)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads or args.heads,
        max_position_embeddings=args.max_positions,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        use_cache=False,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).eval()
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LlamaRMSNorm):
                m.weight.copy_(1.0 + 0.2 * torch.randn_like(m.weight))
    return model


def model_pair(base, dtype, device, mlp: str = "swiglu"):
    """(unpatched, patched): copies of `base` in `dtype` on `device`, the second patched with kjit."""
    ref = copy.deepcopy(base).to(device=device, dtype=dtype)
    patched = copy.deepcopy(ref)
    counts = patch_llama(patched, mlp)
    return ref, patched, counts


def _tokens(shape: tuple, vocab: int, device, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g).to(device)


# -- checks ----------------------------------------------------------------------------------------------
def _diff(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def check_correctness(base, dtype, device, batch: int, seq: int, vocab: int, seed: int, mlp: str = "swiglu") -> dict:
    """Logits and gradients of the patched model against the unpatched one; {"failures": [...], ...}."""
    name = str(dtype).replace("torch.", "")
    out: dict = {"dtype": name, "tokens": [batch, seq], "failures": []}
    fail = out["failures"].append
    ref, patched, counts = model_pair(base, dtype, device, mlp)
    out["patched_modules"] = counts
    left = unpatched_left(patched, mlp)
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
            torch.testing.assert_close(
                p.grad.float(), r.grad.float(), rtol=tol["rtol"], atol=tol["atol_frac"] * scale + 1e-12
            )
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
    return {
        "graphs": ex.graph_count,
        "graph_breaks": ex.graph_break_count,
        "reasons": [k + (f" [{n} times]" if n > 1 else "") for k, n in reasons.items()],
    }


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
    return {
        n: {"median_ms": statistics.median(s), "min_ms": min(s), "max_ms": max(s), "n": len(s)}
        for n, s in samples.items()
    }


def count_kernels(fn, device, forwards: int = 3) -> float:
    """CUDA kernels launched per call of fn (torch.no_grad): torch.profiler's CUDA kernel events over
    `forwards` calls after one unprofiled call, memcpy / memset left out."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        fn()
        _sync(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(forwards):
                fn()
            _sync(device)
    kernels = [
        e
        for e in prof.events()
        if e.device_type == DeviceType.CUDA and not e.name.lower().startswith(("memcpy", "memset"))
    ]
    return len(kernels) / forwards


def run_timing(
    base,
    device,
    shapes: list[tuple],
    vocab: int,
    seed: int,
    iters: int,
    warmup: int,
    compile_: bool,
    log,
    mlp: str = "swiglu",
    kernels: bool = True,
) -> dict:
    import torch._dynamo

    ref, patched, _ = model_pair(base, torch.bfloat16, device, mlp)
    models = {"unpatched eager": ref, "kjit eager": patched}
    if compile_:
        torch._dynamo.reset()
        models["unpatched torch.compile"] = torch.compile(ref, dynamic=False)
        models["kjit torch.compile"] = torch.compile(patched, dynamic=False)
    out: dict = {"dtype": "bfloat16", "mlp": mlp, "iters": iters, "warmup": warmup, "shapes": {}}
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
            fns[name] = lambda m=m, ids=ids: m(input_ids=ids)
        res = time_forwards(fns, device, iters, warmup)
        row = {"ms": res, "errors": errors, "speedup": {}, "kernels": {}}
        for name, fn in fns.items() if kernels else ():
            try:
                row["kernels"][name] = count_kernels(fn, device)
            except Exception as e:  # noqa: BLE001  (a profiler that fails loses the count only)
                errors[f"{name} (kernel count)"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
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
    for n in names:
        counts = [t["shapes"][s].get("kernels", {}).get(n) for s in shapes]
        if any(c is not None for c in counts):
            rows.append((f"kernels per forward, {n}", ["-" if c is None else f"{c:g}" for c in counts]))
    for kind, target in TARGETS.items():
        cells = []
        for s in shapes:
            r = t["shapes"][s]["speedup"].get(kind)
            cells.append("-" if r is None else f"{r:.2f}x" + ("" if r >= target else " (miss)"))
        rows.append((f"speed kjit / unpatched, {kind} (target >= {target}x)", cells))
    title = f"ms per forward ({t['dtype']}, torch.no_grad, median of {t['iters']}; --mlp {t.get('mlp', 'swiglu')})"
    w = max(len(title), *(len(label) for label, _ in rows)) + 2
    lines = [title.ljust(w) + "".join(f"{s + ' tokens':>16}" for s in shapes)]
    lines += [label.ljust(w) + "".join(f"{c:>16}" for c in cells) for label, cells in rows]
    for s in shapes:
        for n, e in t["shapes"][s]["errors"].items():
            lines.append(f"  {s}: {n} failed: {e}")
    return "\n".join(lines)


def timing_misses(t: dict) -> list[str]:
    return [
        f"{kind} at {s} tokens: {r:.2f}x (target >= {TARGETS[kind]}x)"
        for s, row in t["shapes"].items()
        for kind, r in row["speedup"].items()
        if r < TARGETS[kind]
    ]


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
    ap = argparse.ArgumentParser(
        description="A small Hugging Face Llama with kjit's rms_norm, its fused gated MLP "
        "(linear_swiglu, down_proj with the residual) and add_rms_norm: "
        "correctness, graph breaks, kernel counts and timings."
    )
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1408)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument(
        "--check-tokens",
        type=_shape,
        default=(2, 64),
        metavar="BxS",
        help="batch x sequence length of the correctness and graph-break checks (default 2x64)",
    )
    ap.add_argument("--shapes", default="1x1,8x512", help="batch x sequence lengths to time (default 1x1,8x512)")
    ap.add_argument("--iters", type=int, default=30, help="timed forwards per model and shape (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-timing", action="store_true", help="correctness and graph breaks only")
    ap.add_argument("--no-compile", action="store_true", help="time eager only (no torch.compile)")
    ap.add_argument(
        "--mlp",
        choices=MLP_MODES,
        default="swiglu",
        help="swiglu (default): kjit.ops.linear_swiglu, down_proj on kjit.ops.linear with the residual "
        "fused, add_rms_norm in the decoder layer; silu_mul: cuBLAS GEMMs and one fused "
        "kjit.elementwise silu(a) * b (the example before the matrix ops)",
    )
    ap.add_argument("--no-kernel-count", action="store_true", help="time without counting kernels (torch.profiler)")
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
        print(
            f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}); kjit needs one",
            file=sys.stderr,
        )
        return 2
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    try:
        import transformers
    except ImportError as e:
        print(f"transformers is not installed ({e}): pip install transformers", file=sys.stderr)
        return 2
    import kjit

    result: dict = {
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "kjit": kjit.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        },
        "model": {
            k: getattr(args, k)
            for k in ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab", "seed", "mlp")
        },
    }
    log(
        f"llama_kjit: torch {torch.__version__}, transformers {transformers.__version__}, kjit {kjit.__version__}"
        + (f", {result['versions']['gpu']}" if result["versions"]["gpu"] else f", {device}")
    )
    base = build_base(args)
    log(
        f"model: {args.layers} layers, hidden {args.hidden}, intermediate {args.intermediate}, {args.heads} heads, "
        f"vocab {args.vocab}: {sum(p.numel() for p in base.parameters()) / 1e6:.1f} M parameters"
    )

    failures: list[str] = []
    result["correctness"] = []
    b, s = args.check_tokens
    for dtype in (torch.bfloat16, torch.float32):
        c = check_correctness(base, dtype, device, b, s, args.vocab, args.seed, args.mlp)
        result["correctness"].append(c)
        failures += c["failures"]
        worst = c.get("grad_worst_rel_diff") or {}
        log(
            f"correctness {c['dtype']} ({b}x{s} tokens): patched {c['patched_modules']}, logits max abs diff "
            f"{c['logits_max_abs_diff']:.3g}"
            + (
                f", worst gradient diff {worst['value']:.3g} of max |grad| ({worst['param']})"
                if worst.get("param")
                else ""
            )
            + (": ok" if not c["failures"] else f": {len(c['failures'])} failure(s)")
        )

    ids = _tokens((b, s), args.vocab, device, args.seed)
    ref, patched, _ = model_pair(base, torch.bfloat16, device, args.mlp)
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
        failures.append(
            f"the patched model has {gb['patched']['graph_breaks']} graph break(s): "
            + "; ".join(gb["patched"]["reasons"])
        )

    if not args.no_timing:
        t = run_timing(
            base,
            device,
            shapes,
            args.vocab,
            args.seed,
            args.iters,
            args.warmup,
            not args.no_compile,
            log,
            args.mlp,
            not args.no_kernel_count,
        )
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
