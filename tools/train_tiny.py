#!/usr/bin/env python3
"""tools/train_tiny.py - trains and exports models/k3-tiny, a tiny Kimi K3 that writes English.

Owns: the PyTorch version of the K3 forward pass used for training (spec section 4, the
  same math as tools/msref.py), the training loop, MXFP4 quantisation of the routed
  experts, and the export to the released checkpoint layout (section 1-3).
Idea:
  - architecture: every K3 part at toy width (PARAMS): KDA layers with a chunked but exact
    form of the delta rule, gated MLA without rotary, attention residuals, a dense layer 0,
    Stable LatentMoE with a sigmoid router whose correction bias is trained by
    loss-free balancing, SiTU-GLU everywhere;
  - KDA chunked form (chunk C, exact): with Γ the within-chunk cumulative log decay and
    S0 the state entering the chunk, the delta-rule pseudo values w_i = β_i (v_i -
    k_iᵀ D_i S_{i-1}) solve a unit lower-triangular system (I + L) w = β (v - K̃ S0),
    L_ij = β_i Σ_c k_ic k_jc e^{Γ_ic - Γ_jc} (j < i), K̃ = k ⊙ e^Γ (the factors e^{±Γ} stay
    finite in float32 because Γ >= C·lb = -80 inside a chunk of 16); then
    o_t = (q_t ⊙ e^{Γ_t})ᵀ S0 + Σ_{i<=t} (Σ_c q_tc k_ic e^{Γ_tc - Γ_ic}) w_i and
    S_C = e^{Γ_C} ⊙ S0 + Σ_i (k_i ⊙ e^{Γ_C - Γ_i}) w_iᵀ. `--selftest` checks it against
    the sequential recurrence of spec 4.3 in float64;
  - training: AdamW on random 128-token windows of the tokenized corpus for a wall-time
    budget; the last QAT_FRACTION of the time runs the routed experts through MXFP4
    (straight-through gradient), so the quantised model is the trained one;
  - export: names, shapes, dtypes, data order and shards planned by tools/msgen.py
    (plan_checkpoint, split_items, shard_header: the project's writer), filled with the
    trained values: BF16 trunk (round to nearest even), F32 where the spec says F32,
    A_log padded to head_dim, experts MXFP4 (group 32, scale 2^(s-127), per group the
    better of two scale exponents, codes rounded to nearest);
  - verification (`--verify`, also at the end of training): the exported files read back
    by tools/msref.py give the same logits as this torch model in float64 holding the
    exported values, and msref continues an English prompt greedily.
Invariants: the model computes exactly msref's function (checked, not assumed); seeds
  fixed; torch only here (nothing in `make test` needs it).
Does not: run at inference time; need a GPU.

Usage: train_tiny.py OUT_DIR [--minutes 23] [--seed 7]       train, export, verify
       train_tiny.py OUT_DIR --preset draft --minutes 10     the smaller draft model
                                                              (models/k3-tiny-draft)
       train_tiny.py OUT_DIR --export-only CKPT.pt            export a saved state, verify
       train_tiny.py OUT_DIR --verify                         verify an exported model
       train_tiny.py OUT_DIR --selftest                       chunked KDA == recurrence
Needs: python3-torch, python3-regex, bible-kjv; OUT_DIR must hold tiktoken.model and
  tokenizer_config.json (tools/train_bpe.py).
"""

import argparse
import json
import math
import os
import sys
import time

# OpenBLAS's own threads spin against torch's OpenMP threads on 2 cores (3-10x slower
# steps); torch parallelises, OpenBLAS runs single-threaded inside it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mslib  # noqa: E402
import msgen  # noqa: E402
import train_bpe  # noqa: E402

N_RANKS = 2048
# msgen's parameter names (make_config, plan_checkpoint read them)
PARAMS = dict(layers=8, hidden=128, vocab=N_RANKS + train_bpe.N_SPECIAL, block=3,
              mla=[4, 7, 8], dense=1, experts=16, topk=2, shared=1, conv=4, kda_heads=4,
              kda_dim=32, mla_heads=4, q_lora=64, kv_lora=32, nope=32, rope=16, v=32,
              inter=256, moe_inter=96, latent=64, scaling=1.0, shards=4, seed=7)
# --preset: the configurations this script trains. "tiny" is models/k3-tiny; "draft" is
# models/k3-tiny-draft, a smaller model of the same architecture and tokenizer that
# speculative decoding runs ahead of k3-tiny (--draft-model): 4 layers (KDA at one-based
# [1, 2], MLA at [3, 4]), hidden 64, 8 experts. The vocabulary must stay k3-tiny's.
PRESETS = {
    "tiny": PARAMS,
    "draft": dict(layers=4, hidden=64, vocab=N_RANKS + train_bpe.N_SPECIAL, block=2,
                  mla=[3, 4], dense=1, experts=8, topk=2, shared=1, conv=4, kda_heads=2,
                  kda_dim=32, mla_heads=2, q_lora=32, kv_lora=16, nope=16, rope=8, v=16,
                  inter=128, moe_inter=64, latent=32, scaling=1.0, shards=3, seed=7),
}
EPS = 1e-5
LOWER_BOUND = -5.0
BETA1, BETA2 = 4.0, 25.0
CHUNK = 16
CONTEXT = 128
QAT_FRACTION = 0.3
PROMPT = "And the LORD spake unto Moses, saying,"
M = mslib.PREFIX


# =========================================================================================
# The model (spec section 4), batched over [B, T]
# =========================================================================================

def rms_norm(x, w):
    """RMSNorm over the last axis: w ⊙ x / sqrt(mean(x²) + eps)."""
    return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def situ_glu(g, u):
    """β1·tanh(g/β1)·σ(g) · β2·tanh(u/β2); the sigmoid takes the uncapped g."""
    return BETA1 * torch.tanh(g / BETA1) * torch.sigmoid(g) * BETA2 * torch.tanh(u / BETA2)


def attn_res_read(cands, w_norm, w_proj):
    """Section 4.2: softmax over candidates of <RMSNorm(V_j; w_norm), w_proj>, mixing raw V_j."""
    V = torch.stack(cands, 0)
    s = (rms_norm(V, w_norm) * w_proj).sum(-1)
    p = torch.softmax(s, 0)
    return (p.unsqueeze(-1) * V).sum(0)


FP4 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def mxfp4_quantize(w):
    """w [..., rows, in] -> (codes uint8 [..., rows, in], scale bytes uint8 [..., rows, in/32],
    the dequantised values like w). Per 32-group the scale exponent is e1 = ceil(log2(amax/6))
    (no clipping) or e1 - 1 (values above 6·2^e clip), whichever has the smaller squared error;
    magnitudes round to the nearest code (midpoints go up)."""
    with torch.no_grad():
        wd = w.detach().to(torch.float64)
        sh = wd.shape
        g = wd.reshape(*sh[:-1], sh[-1] // 32, 32)
        amax = g.abs().amax(-1, keepdim=True).clamp_min(1e-30)
        e1 = torch.ceil(torch.log2(amax / 6.0))
        mags = torch.tensor(FP4, dtype=torch.float64)
        mids = (mags[1:] + mags[:-1]) / 2
        cands = []
        for e in (e1, e1 - 1):
            e = e.clamp(-127, 127)
            a = (g.abs() / torch.exp2(e)).clamp(max=6.0)
            idx = torch.bucketize(a, mids, right=True)
            deq = torch.sign(g) * mags[idx] * torch.exp2(e)
            cands.append((idx, e, deq, (deq - g).pow(2).sum(-1, keepdim=True)))
        take = cands[0][3] <= cands[1][3]                                  # [..., groups, 1]
        idx, e, deq = (torch.where(take, c0, c1) for c0, c1 in zip(cands[0][:3], cands[1][:3]))
        codes = idx.to(torch.uint8) | torch.where(g < 0, 8, 0).to(torch.uint8)
        codes = torch.where(idx == 0, torch.zeros_like(codes), codes)      # no -0
        scale = (e.squeeze(-1) + 127).to(torch.uint8)
        return codes.reshape(sh), scale, deq.reshape(sh).to(w.dtype)


def ste_quant(w):
    """MXFP4 in the forward pass, identity in the backward pass."""
    return w + (mxfp4_quantize(w)[2] - w).detach()


def causal_conv_silu(x, w):
    """x [B, T, C]; w [C, 1, K], oldest tap first; zero history; SiLU."""
    K = w.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w, groups=x.shape[-1])
    return F.silu(y.transpose(1, 2))


def l2_norm(x):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def kda_recurrent(q, k, v, g, beta):
    """Spec 4.3 step by step. q, k, v, g [B, T, nh, d] (q already / sqrt(d), g = log decay),
    beta [B, T, nh] -> o [B, T, nh, d]."""
    B, T, nh, d = q.shape
    S = q.new_zeros(B, nh, d, d)
    out = []
    for t in range(T):
        S = torch.exp(g[:, t]).unsqueeze(-1) * S                          # 1. decay rows
        u = torch.einsum("bhkv,bhk->bhv", S, k[:, t])                     # 2. read along k
        S = S + k[:, t].unsqueeze(-1) * (beta[:, t, :, None] * (v[:, t] - u)).unsqueeze(-2)
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))             # 4. updated state
    return torch.stack(out, 1)


def kda_chunked(q, k, v, g, beta, C=CHUNK):
    """The same function as kda_recurrent, C positions at a time (see the file header)."""
    B, T, nh, d = q.shape
    pad = (-T) % C
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // C
    # [B, nh, N, C, d]
    q, k, v, g = (x.reshape(B, N, C, nh, d).permute(0, 3, 1, 2, 4) for x in (q, k, v, g))
    beta = beta.reshape(B, N, C, nh).permute(0, 3, 1, 2)
    G = torch.cumsum(g, 3)                                                 # Γ in [C lb, 0]
    eG, enG = torch.exp(G), torch.exp(-G)                                  # no overflow: C lb >= -80
    Kp, Kn, Qt = k * eG, k * enG, q * eG
    incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    KK = (Kp @ Kn.transpose(-1, -2)) * incl.tril(-1)                       # e^{Γ_i - Γ_j}, j < i
    QK = (Qt @ Kn.transpose(-1, -2)) * incl                                # j <= i
    A = torch.eye(C, dtype=q.dtype, device=q.device) + beta.unsqueeze(-1) * KK
    rhs = torch.cat([beta.unsqueeze(-1) * v, beta.unsqueeze(-1) * Kp], -1)
    sol = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
    U, Wk = sol[..., :d], sol[..., d:]
    kdec = k * torch.exp(G[:, :, :, -1:, :] - G)                            # A_C / A_i
    S = q.new_zeros(B, nh, d, d)
    outs = []
    for n in range(N):
        w = U[:, :, n] - Wk[:, :, n] @ S
        outs.append(Qt[:, :, n] @ S + QK[:, :, n] @ w)
        S = eG[:, :, n, -1].unsqueeze(-1) * S + kdec[:, :, n].transpose(-1, -2) @ w
    o = torch.stack(outs, 2)                                               # [B, nh, N, C, d]
    return o.permute(0, 2, 3, 1, 4).reshape(B, N * C, nh, d)[:, :T]


class K3Tiny(torch.nn.Module):
    """Parameters under their checkpoint names ('.' -> '__'), except: A_log is [num_heads]
    (exported padded to head_dim) and the routed experts of layer L are three stacked
    tensors layers.L.experts.w1/w2/w3 [E, out, in]."""

    def __init__(self, p, seed):
        super().__init__()
        self.p = p
        self.qat = False
        self.recurrent = False
        gen = torch.Generator().manual_seed(seed)
        H, V = p["hidden"], p["vocab"]

        def add(name, shape, std=0.0, mean=0.0, init=None):
            t = init if init is not None else mean + std * torch.randn(*shape, generator=gen)
            self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(t.float()))

        add(M + "embed_tokens.weight", [V, H], 1.0)
        add(mslib.LM_HEAD, [V, H], 1.0 / math.sqrt(H))
        add(M + "norm.weight", [H], mean=1.0)
        add(M + "output_attn_res_norm.weight", [H], mean=1.0)
        add(M + "output_attn_res_proj.weight", [1, H])
        nh, d, K = p["kda_heads"], p["kda_dim"], p["conv"]
        P = nh * d
        mh, dn, dr, dv = p["mla_heads"], p["nope"], p["rope"], p["v"]
        E, R, I, S = p["experts"], p["latent"], p["moe_inter"], p["shared"] * p["moe_inter"]
        sH = 1.0 / math.sqrt(H)
        for il in range(p["layers"]):
            pre = M + "layers.%d." % il
            for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm",
                      "mlp_res_norm"):
                add(pre + n + ".weight", [H], mean=1.0)
            for n in ("self_attention_res_proj", "mlp_res_proj"):
                add(pre + n + ".weight", [1, H])
            sa = pre + "self_attn."
            depth = 1.0 / math.sqrt(2 * p["layers"])
            if (il + 1) in p["mla"]:
                add(sa + "q_a_proj.weight", [p["q_lora"], H], sH)
                add(sa + "q_a_layernorm.weight", [p["q_lora"]], mean=1.0)
                add(sa + "q_b_proj.weight", [mh * (dn + dr), p["q_lora"]], 1 / math.sqrt(p["q_lora"]))
                add(sa + "kv_a_proj_with_mqa.weight", [p["kv_lora"] + dr, H], sH)
                add(sa + "kv_a_layernorm.weight", [p["kv_lora"]], mean=1.0)
                add(sa + "kv_b_proj.weight", [mh * (dn + dv), p["kv_lora"]], 1 / math.sqrt(p["kv_lora"]))
                add(sa + "g_proj.weight", [mh * dv, H], sH)
                add(sa + "o_proj.weight", [H, mh * dv], depth / math.sqrt(mh * dv))
            else:
                for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
                    add(sa + n + ".weight", [P, H], sH)
                add(sa + "o_proj.weight", [H, P], depth / math.sqrt(P))
                for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                    w = 0.2 * torch.randn(P, 1, K, generator=gen)
                    w[..., -1] += 1.0                                      # start near identity
                    add(sa + n + ".weight", None, init=w)
                add(sa + "f_a_proj.weight", [d, H], sH)
                add(sa + "f_b_proj.weight", [P, d], 0.1 / math.sqrt(d))
                add(sa + "b_proj.weight", [nh, H], sH)
                # decay e^{lb σ(f)} from ~0.99 (long memory) to ~0.37 per step at the start
                frac = torch.exp(torch.empty(P).uniform_(math.log(0.002), math.log(0.2),
                                                         generator=gen))
                add(sa + "dt_bias", None, init=torch.log(frac / (1 - frac)))
                add(sa + "A_log", None, init=torch.zeros(nh))
                add(sa + "o_norm.weight", [d], mean=1.0)
            if il < p["dense"]:
                Id = p["inter"]
                add(pre + "mlp.gate_proj.weight", [Id, H], sH)
                add(pre + "mlp.up_proj.weight", [Id, H], sH)
                add(pre + "mlp.down_proj.weight", [H, Id], depth / math.sqrt(Id))
            else:
                mo = pre + "block_sparse_moe."
                add(mo + "gate.weight", [E, H], sH)
                add(mo + "gate.e_score_correction_bias", [E])
                add(mo + "routed_expert_down_proj.weight", [R, H], sH)
                add(mo + "routed_expert_norm.weight", [R], mean=1.0)
                add(mo + "routed_expert_up_proj.weight", [H, R], depth / math.sqrt(R))
                add(mo + "shared_experts.gate_proj.weight", [S, H], sH)
                add(mo + "shared_experts.up_proj.weight", [S, H], sH)
                add(mo + "shared_experts.down_proj.weight", [H, S], depth / math.sqrt(S))
                add(pre + "experts.w1", [E, I, R], 1 / math.sqrt(R))
                add(pre + "experts.w2", [E, R, I], 1 / math.sqrt(I))
                add(pre + "experts.w3", [E, I, R], 1 / math.sqrt(R))
        # the router correction bias is trained by the balancing rule, not by gradients
        for il in range(p["dense"], p["layers"]):
            self.W(M + "layers.%d.block_sparse_moe.gate.e_score_correction_bias" % il).requires_grad_(False)
        self.loads = {}

    def W(self, name):
        return getattr(self, name.replace(".", "__"))

    # --- section 4.3 ---
    def kda(self, x, pre):
        p, W = self.p, lambda n: self.W(pre + n)
        B, T, _ = x.shape
        nh, d = p["kda_heads"], p["kda_dim"]
        q = causal_conv_silu(x @ W("q_proj.weight").T, W("q_conv1d.weight")).reshape(B, T, nh, d)
        k = causal_conv_silu(x @ W("k_proj.weight").T, W("k_conv1d.weight")).reshape(B, T, nh, d)
        v = causal_conv_silu(x @ W("v_proj.weight").T, W("v_conv1d.weight")).reshape(B, T, nh, d)
        q, k = l2_norm(q) / math.sqrt(d), l2_norm(k)
        f = (x @ W("f_a_proj.weight").T) @ W("f_b_proj.weight").T + W("dt_bias")
        a = torch.exp(W("A_log"))[:, None]                                 # one per head
        g = LOWER_BOUND * torch.sigmoid(a * f.reshape(B, T, nh, d))        # log decay
        beta = torch.sigmoid(x @ W("b_proj.weight").T)
        o = (kda_recurrent if self.recurrent else kda_chunked)(q, k, v, g, beta)
        gate = torch.sigmoid(x @ W("g_proj.weight").T).reshape(B, T, nh, d)
        y = rms_norm(o, W("o_norm.weight")) * gate                         # norm, then gate
        return y.reshape(B, T, nh * d) @ W("o_proj.weight").T

    # --- section 4.4 ---
    def mla(self, x, pre):
        p, W = self.p, lambda n: self.W(pre + n)
        B, T, _ = x.shape
        mh, dn, dr, dv, kl = p["mla_heads"], p["nope"], p["rope"], p["v"], p["kv_lora"]
        cq = rms_norm(x @ W("q_a_proj.weight").T, W("q_a_layernorm.weight"))
        q = (cq @ W("q_b_proj.weight").T).reshape(B, T, mh, dn + dr)
        ckv = x @ W("kv_a_proj_with_mqa.weight").T
        kv = (rms_norm(ckv[..., :kl], W("kv_a_layernorm.weight")) @ W("kv_b_proj.weight").T
              ).reshape(B, T, mh, dn + dv)
        k_rope = ckv[..., kl:]                                             # shared, not normed
        score = (torch.einsum("bthc,bshc->bhts", q[..., :dn], kv[..., :dn])
                 + torch.einsum("bthc,bsc->bhts", q[..., dn:], k_rope)) / math.sqrt(dn + dr)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        score = score.masked_fill(~mask, float("-inf"))
        o = torch.einsum("bhts,bshc->bthc", torch.softmax(score, -1), kv[..., dn:])
        gate = torch.sigmoid(x @ W("g_proj.weight").T).reshape(B, T, mh, dv)
        return (o * gate).reshape(B, T, mh * dv) @ W("o_proj.weight").T

    # --- section 4.5 ---
    def moe(self, x, il):
        p = self.p
        pre = M + "layers.%d." % il
        W = lambda n: self.W(pre + "block_sparse_moe." + n)
        s = torch.sigmoid(x @ W("gate.weight").T)                          # [B, T, E]
        choice = s.detach() + W("gate.e_score_correction_bias")
        idx = torch.topk(choice, p["topk"], -1).indices
        sel = torch.zeros_like(s).scatter(-1, idx, 1.0)
        self.loads[il] = sel.detach().reshape(-1, sel.shape[-1]).mean(0)
        w = s * sel
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * p["scaling"]
        z = x @ W("routed_expert_down_proj.weight").T                      # [B, T, R]
        w1, w2, w3 = (self.W(pre + "experts." + n) for n in ("w1", "w2", "w3"))
        if self.qat:
            w1, w2, w3 = ste_quant(w1), ste_quant(w2), ste_quant(w3)
        zf, wf, sf = (t.reshape(-1, t.shape[-1]) for t in (z, w, sel))
        acc = zf.new_zeros(zf.shape)
        for ie in range(p["experts"]):                                     # tokens of expert ie
            rows = torch.nonzero(sf[:, ie] > 0).squeeze(1)
            if rows.numel():
                ze = zf[rows]
                y = situ_glu(ze @ w1[ie].T, ze @ w3[ie].T) @ w2[ie].T
                acc = acc.index_add(0, rows, wf[rows, ie, None] * y)
        r = rms_norm(acc.reshape(z.shape), W("routed_expert_norm.weight"))
        shared = situ_glu(x @ W("shared_experts.gate_proj.weight").T,
                          x @ W("shared_experts.up_proj.weight").T) @ W("shared_experts.down_proj.weight").T
        return r @ W("routed_expert_up_proj.weight").T + shared

    def dense(self, x, il):
        W = lambda n: self.W(M + "layers.%d.mlp.%s.weight" % (il, n))
        return situ_glu(x @ W("gate_proj").T, x @ W("up_proj").T) @ W("down_proj").T

    # --- section 4.2 ---
    def forward(self, ids):
        p = self.p
        run = self.W(M + "embed_tokens.weight")[ids]
        bank = []
        for il in range(p["layers"]):
            pre = M + "layers.%d." % il
            W = lambda n: self.W(pre + n + ".weight")
            h = run
            if bank:
                h = attn_res_read(bank + [run], W("self_attention_res_norm"), W("self_attention_res_proj"))
            if il % p["block"] == 0:
                bank.append(run)
                run = None
            x = rms_norm(h, W("input_layernorm"))
            a = self.mla(x, pre + "self_attn.") if (il + 1) in p["mla"] else self.kda(x, pre + "self_attn.")
            run = a if run is None else run + a
            h2 = attn_res_read(bank + [run], W("mlp_res_norm"), W("mlp_res_proj"))
            x2 = rms_norm(h2, W("post_attention_layernorm"))
            run = run + (self.dense(x2, il) if il < p["dense"] else self.moe(x2, il))
        y = rms_norm(attn_res_read(bank + [run], self.W(M + "output_attn_res_norm.weight"),
                                   self.W(M + "output_attn_res_proj.weight")),
                     self.W(M + "norm.weight"))
        return y @ self.W(mslib.LM_HEAD).T

    def balance_router(self, rate):
        """Loss-free balancing: raise the correction bias of under-used experts, lower it for
        over-used ones (the bias steers selection only)."""
        with torch.no_grad():
            for il, load in self.loads.items():
                b = self.W(M + "layers.%d.block_sparse_moe.gate.e_score_correction_bias" % il)
                b += rate * torch.sign(load.mean() - load)


# =========================================================================================
# Export (the released layout, planned by msgen)
# =========================================================================================

def exported_values(model):
    """name -> (dtype, numpy array with the exact values written): BF16 tensors rounded to
    nearest even (as float32), F32 as is, experts as (packed, scale) uint8."""
    p = model.p
    out = {}
    rng = np.random.default_rng(0)
    items = msgen.plan_checkpoint(p, rng)
    for item in items:
        for name, dt, shape, _ in item:
            if ".experts." in name:
                continue
            if name.endswith("A_log"):
                w = np.zeros(shape, np.float32)
                w[:p["kda_heads"]] = model.W(name).detach().numpy()
            else:
                w = model.W(name).detach().numpy().astype(np.float32).reshape(shape)
            if dt == msgen.BF16:
                w = (msgen.to_bf16_bits(w).astype(np.uint32) << 16).view(np.float32).reshape(shape)
            out[name] = (dt, w)
    for il in range(p["dense"], p["layers"]):
        pre = M + "layers.%d." % il
        for wn in ("w1", "w2", "w3"):
            codes, scale, _ = mxfp4_quantize(model.W(pre + "experts." + wn))
            codes, scale = codes.numpy(), scale.numpy()
            packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)  # even = low
            for ie in range(p["experts"]):
                e = pre + "block_sparse_moe.experts.%d.%s." % (ie, wn)
                out[e + "weight_packed"] = (msgen.U8, packed[ie])
                out[e + "weight_scale"] = (msgen.U8, scale[ie])
    return out, items


def export(model, out_dir, meta):
    p = model.p
    values, items = exported_values(model)
    shards = msgen.split_items(items, p["shards"])
    cfg = msgen.make_config(p)
    n = p["vocab"] - train_bpe.N_SPECIAL
    ids = {"bos_token_id": n, "eos_token_id": n + 2, "pad_token_id": n + 255}
    cfg.update(ids)
    cfg["text_config"].update(ids)
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        fname = mslib.shard_name(i + 1, len(shards))
        header, _ = msgen.shard_header(tensors)
        with open(os.path.join(out_dir, fname + ".tmp"), "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for name, dt, shape, _ in tensors:
                dtype, w = values[name]
                assert dtype == dt and list(w.shape) == list(shape), name
                if dt == msgen.BF16:
                    b = (w.view(np.uint32) >> 16).astype("<u2").tobytes()
                elif dt == msgen.F32:
                    b = w.astype("<f4").tobytes()
                else:
                    b = w.astype(np.uint8).tobytes()
                f.write(b)
                total += len(b)
                weight_map[name] = fname
        os.replace(os.path.join(out_dir, fname + ".tmp"), os.path.join(out_dir, fname))
    index = {"metadata": {"total_size": total},
             "weight_map": {k: weight_map[k] for k in sorted(weight_map)}}
    with open(os.path.join(out_dir, mslib.INDEX_FILE), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    print("export: %d tensors, %d bytes in %d shards" % (len(weight_map), total, len(shards)),
          file=sys.stderr)


def load_exported(model, out_dir):
    """Set the model's parameters to the exported values, read back by msref's reader."""
    import msref
    ck = msref.Checkpoint(out_dir)
    p = model.p
    with torch.no_grad():
        for name, prm in model.named_parameters():
            name = name.replace("__", ".")
            if ".experts." in name:
                il = int(name.split(".")[3])
                wn = name.split(".")[-1]
                mats = []
                for ie in range(p["experts"]):
                    e = M + "layers.%d.block_sparse_moe.experts.%d.%s." % (il, ie, wn)
                    mats.append(msref.mxfp4_matrix(ck.tensor(e + "weight_packed"),
                                                   ck.tensor(e + "weight_scale")))
                prm.copy_(torch.from_numpy(np.stack(mats)))
            elif name.endswith("A_log"):
                prm.copy_(torch.from_numpy(ck.tensor(name)[:p["kda_heads"]]))
            else:
                prm.copy_(torch.from_numpy(ck.tensor(name)).reshape(prm.shape))


def verify(out_dir, seed, log):
    """msref on the exported files == this torch model holding the exported values (float64);
    msref continues PROMPT greedily. Returns the sample text."""
    import msref
    tok = train_bpe.Tokenizer(out_dir)
    model = K3Tiny(PARAMS, seed).double()
    load_exported(model, out_dir)
    model.qat = False
    ref = msref.Model(out_dir)
    with open(os.path.join(out_dir, "heldout.txt")) as f:
        ids = tok.encode(f.read())[:48]
    with torch.no_grad():
        mine = model(torch.tensor([ids]))[0].numpy()
        model.recurrent = True
        mine_rec = model(torch.tensor([ids]))[0].numpy()
    theirs = msref.teacher_force(ref, ids)
    scale = np.max(np.abs(theirs))
    err = np.max(np.abs(mine - theirs)) / scale
    err_rec = np.max(np.abs(mine_rec - theirs)) / scale
    log("verify: max |torch - msref| / max|logit| = %.3g (chunked KDA), %.3g (recurrent KDA)"
        % (err, err_rec))
    if not (err < 1e-9 and err_rec < 1e-9):
        raise SystemExit("verify: the torch model and msref disagree")
    prompt = tok.encode(PROMPT)
    gen, _ = msref.greedy(ref, prompt, 40)
    text = tok.decode(gen)
    log("verify: msref greedy: %r + %r" % (PROMPT, text))
    return text


# =========================================================================================
# Training
# =========================================================================================

def corpus_ids(out_dir, cache):
    if cache and os.path.isfile(cache):
        return np.load(cache)
    text, _ = train_bpe.corpus_split()
    ids = np.array(train_bpe.Tokenizer(out_dir).encode(text), dtype=np.int64)
    if cache:
        np.save(cache, ids)
    return ids


def heldout_nll(model, held):
    with torch.no_grad():
        lg = model(held[None, :-1])[0]
        return float(F.cross_entropy(lg, held[1:]))


def train(a, log):
    torch.manual_seed(a.seed)
    data = torch.from_numpy(corpus_ids(a.out_dir, a.cache))
    tok = train_bpe.Tokenizer(a.out_dir)
    with open(os.path.join(a.out_dir, "heldout.txt")) as f:
        held = torch.tensor(tok.encode(f.read()))
    log("train: %d training tokens, %d held-out tokens" % (len(data), len(held)))
    model = K3Tiny(PARAMS, a.seed)
    n_params = sum(x.numel() for x in model.parameters())
    log("train: %d parameters" % n_params)
    decay = [x for n, x in model.named_parameters() if x.requires_grad and x.dim() >= 2
             and "embed_tokens" not in n]
    other = [x for n, x in model.named_parameters() if x.requires_grad and not
             (x.dim() >= 2 and "embed_tokens" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    budget = a.minutes * 60.0
    t0 = time.time()
    step, curve, ema = 0, [], None
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        if not model.qat and frac >= 1.0 - QAT_FRACTION:
            model.qat = True
            log("train: step %d: quantisation-aware from here" % step)
        starts = rng.integers(0, len(data) - CONTEXT - 1, a.batch)
        win = torch.stack([data[s:s + CONTEXT + 1] for s in starts])
        logits = model(win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.balance_router(2e-3)
        ema = float(loss) if ema is None else 0.98 * ema + 0.02 * float(loss)
        step += 1
        if step % a.log_every == 0:
            hn = heldout_nll(model, held)
            curve.append({"step": step, "seconds": round(time.time() - t0), "train_loss": round(ema, 4),
                          "heldout_nll": round(hn, 4), "qat": model.qat})
            loads = torch.stack(list(model.loads.values()))
            log("step %5d  %5.0fs  lr %.2e  loss %.3f  heldout %.3f  expert load min/max %.3f/%.3f"
                % (step, time.time() - t0, lr, ema, hn, float(loads.min()), float(loads.max())))
    elapsed = time.time() - t0
    model.qat = True
    hn = heldout_nll(model, held)
    log("train: %d steps, %.0f s, %d tokens; held-out NLL with MXFP4 experts %.4f"
        % (step, elapsed, step * a.batch * CONTEXT, hn))
    torch.save(model.state_dict(), a.save)
    meta = {"steps": step, "seconds": round(elapsed), "batch": a.batch, "context": CONTEXT,
            "lr": a.lr, "seed": a.seed, "tokens_seen": step * a.batch * CONTEXT,
            "train_tokens": len(data), "params": n_params, "curve": curve,
            "final_heldout_nll_fp32_trunk_mxfp4_experts": round(hn, 4),
            "torch": torch.__version__, "qat_fraction": QAT_FRACTION}
    return model, meta


def selftest(log):
    """Chunked KDA == the sequential recurrence, float64, lengths that are and are not a
    multiple of the chunk."""
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for T in (5, 16, 37):
        B, nh, d = 2, 3, 8
        q = l2_norm(torch.randn(B, T, nh, d, generator=gen, dtype=torch.float64)) / math.sqrt(d)
        k = l2_norm(torch.randn(B, T, nh, d, generator=gen, dtype=torch.float64))
        v = torch.randn(B, T, nh, d, generator=gen, dtype=torch.float64)
        g = LOWER_BOUND * torch.rand(B, T, nh, d, generator=gen, dtype=torch.float64)
        beta = torch.rand(B, T, nh, generator=gen, dtype=torch.float64)
        a, b = kda_recurrent(q, k, v, g, beta), kda_chunked(q, k, v, g, beta, C=8)
        worst = max(worst, float((a - b).abs().max() / a.abs().max()))
    log("selftest: chunked KDA vs recurrence, max relative difference %.3g" % worst)
    if worst > 1e-12:
        raise SystemExit("selftest failed")
    # float32 at the decay extremes (every gate at the lower bound, or at 0) stays finite
    # and close to the float64 recurrence
    for fill in (LOWER_BOUND, 0.0, None):
        gg = g if fill is None else torch.full_like(g, fill)
        a = kda_recurrent(q, k, v, gg, beta)
        b = kda_chunked(q.float(), k.float(), v.float(), gg.float(), beta.float())
        err = float((a - b.double()).abs().max() / a.abs().max())
        log("selftest: float32 chunked KDA, gates %s: max relative difference %.3g"
            % ("random" if fill is None else fill, err))
        if not err < 1e-5:
            raise SystemExit("selftest: float32 chunked KDA is inaccurate")
    w = torch.randn(3, 8, 64, generator=gen) * torch.exp2(torch.randint(-6, 6, (3, 8, 1)).float())
    codes, scale, deq = mxfp4_quantize(w)
    import msref
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).numpy()
    back = np.stack([msref.mxfp4_matrix(packed[i], scale[i].numpy()) for i in range(3)])
    if not np.array_equal(back, deq.double().numpy()):
        raise SystemExit("selftest: MXFP4 codes do not decode to the quantised values")
    rel = float((deq - w).norm() / w.norm())
    log("selftest: MXFP4 round trip exact; relative quantisation error %.3f" % rel)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--minutes", type=float, default=23.0, help="training wall time")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                    help="the configuration (tiny: models/k3-tiny; draft: models/k3-tiny-draft)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--cache", default="/tmp/k3tiny_corpus_ids.npy", help="tokenized corpus cache")
    ap.add_argument("--save", help="where the trained state goes (default /tmp/k3tiny_PRESET_state.pt)")
    ap.add_argument("--export-only", metavar="STATE", help="export a saved state")
    ap.add_argument("--verify", action="store_true", help="only verify an exported model")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    global PARAMS
    PARAMS = PRESETS[a.preset]
    msgen.check_params(PARAMS)      # the layout's limits (MXFP4 groups of 32), before any work
    if a.save is None:
        a.save = "/tmp/k3tiny_%s_state.pt" % a.preset

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if a.selftest:
        selftest(log)
        return 0
    if a.verify:
        verify(a.out_dir, a.seed, log)
        return 0
    selftest(log)
    if a.export_only:
        model = K3Tiny(PARAMS, a.seed)
        model.load_state_dict(torch.load(a.export_only))
        with open(os.path.join(a.out_dir, "training.json")) as f:
            meta = json.load(f)
    else:
        model, meta = train(a, log)
    meta["sample_prompt"] = PROMPT
    meta["preset"] = a.preset
    meta["config"] = {k: PARAMS[k] for k in sorted(PARAMS)}
    export(model, a.out_dir, meta)
    meta["sample_msref_greedy"] = verify(a.out_dir, a.seed, log)
    with open(os.path.join(a.out_dir, "training.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
