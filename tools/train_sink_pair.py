#!/usr/bin/env python3
"""Trains two small byte-level language models that differ only in the attention output gate
(`none` and `elementwise` sigmoid, Qwen3-Next layout; optionally `headwise`) and writes them, with
validation text, their logits and their attention statistics, to
tests/data/byte_lm_<gate>.safetensors. examples/attention_sink_report.cpp and tests/test_byte_lm.cpp
read them.

Not needed by the build, the tests or CI (they only read the committed files). To retrain:

    apt-get install bible-kjv                      # Debian's King James Bible (the text)
    python3 -m venv /work/venv && /work/venv/bin/pip install torch safetensors numpy
    # the committed pair: one process per model, one thread each, both at once on 2 cores (25-28
    # min); the defaults are that run's (8 layers, 512-token windows, 2500 steps of 4 windows)
    /work/venv/bin/python tools/train_sink_pair.py --threads 1 --gates none &
    /work/venv/bin/python tools/train_sink_pair.py --threads 1 --gates elementwise

The model (examples/byte_lm.hpp runs the same forward with the library):
  tokens: bytes 0..255 and BOS = 256; every training window starts with BOS
  x = embed[tokens]
  per layer: h = x + o_proj(SDPA(rope(norm_q(q)), rope(norm_k(k)), v) * sigmoid(gate))   (input_norm(x))
             x = h + down(silu(gate_proj(n)) * up_proj(n)),  n = post_norm(h)
  logits = norm(x) embed^T                                                  (tied embeddings)
  Every RMSNorm is zero-centred (x_hat * (1 + w)), as Qwen3-Next's; RoPE is NeoX style on the
  first rotary_dim dims of each head (partial rotary); no biases. The q_proj rows per query head
  are [q_h (D) | gate_h (D, or 1 if headwise)].

The two runs share the seed, the initial weights of every common tensor, the data order and the
schedule: they differ only in the gate rows of q_proj. Text: the King James Bible as the Debian
package bible-kjv prints it, one verse per line without its reference; the last book (Revelation)
is held out for validation.

Tensors of each file (weights in bf16 unless noted; the float32 run trained on what it stores,
see --weights):
  embed [257, hidden]; layers.{i}.{input_norm,post_norm} [hidden]; layers.{i}.attn.{q_proj,
  k_proj,v_proj,o_proj} [out, in]; layers.{i}.attn.{q_norm,k_norm} [head_dim];
  layers.{i}.mlp.{gate_proj,up_proj} [inter, hidden], layers.{i}.mlp.down_proj [hidden, inter];
  norm [hidden]
  validation.tokens [rows, seq_len - 1] (U8 bytes): each row runs as BOS + the row (seq_len tokens)
  expected.logits [seq_len, 257] (f32): PyTorch's logits for validation row 0
  expected.{sink_share,gate_mean,gate_below_0_1,max_abs_before,max_abs_after} [layers, rows,
      seq_len, heads] (f32) for every validation row; expected.max_abs_hidden [layers + 1, rows]
      (f32), the largest |x| entering each layer and leaving the last
  train.loss [steps] (f32, the training loss per step); train.val_loss [evals] (f32) at
      train.val_step [evals] (I64), in f32; the validation loss of the stored weights is in the
      metadata (val_loss_stored)
The config, the schedule and the versions are in __metadata__ (strings).
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np
import safetensors
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

BOS = 256
VOCAB = 257


def load_text(path):
    """The KJV, one verse per line without its reference: (training bytes, validation bytes)."""
    if path:
        with open(path, "rb") as f:
            raw = f.read().decode("utf-8")
    else:
        raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True, text=True).stdout
    train, val = [], []
    for line in raw.splitlines():
        ref, _, verse = line.partition(" ")
        if not verse or ":" not in ref:
            continue
        (val if ref.startswith("Rev") and ref[3:4].isdigit() else train).append(verse)
    encode = lambda lines: np.frombuffer(("\n".join(lines) + "\n").encode("ascii", "replace"),
                                         dtype=np.uint8)
    return encode(train), encode(val)


class RmsNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))  # zero-centred: scale 1 + w
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)) * (1 + self.weight)


def rope_tables(cfg, length):
    half = cfg["rotary_dim"] // 2
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(half, dtype=torch.float64) * 2 / cfg["rotary_dim"]))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()  # [len, half]


def rope(x, cos, sin):  # x [b, len, heads, D]: NeoX rotate-half on the first rotary_dim dims
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, gate):
        super().__init__()
        h, kv, d, hid = cfg["num_q_heads"], cfg["num_kv_heads"], cfg["head_dim"], cfg["hidden"]
        self.h, self.kv, self.d, self.gate = h, kv, d, gate
        self.gate_per_head = {"none": 0, "headwise": 1, "elementwise": d}[gate]
        self.q_proj = nn.Linear(hid, h * (d + self.gate_per_head), bias=False)
        self.k_proj = nn.Linear(hid, kv * d, bias=False)
        self.v_proj = nn.Linear(hid, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, hid, bias=False)
        self.q_norm = RmsNorm(d, cfg["rms_norm_eps"])
        self.k_norm = RmsNorm(d, cfg["rms_norm_eps"])

    def forward(self, x, cos, sin, stats=None):
        b, n, _ = x.shape
        p = self.q_proj(x).view(b, n, self.h, self.d + self.gate_per_head)
        q, g = p[..., :self.d], p[..., self.d:]
        q = rope(self.q_norm(q), cos, sin)
        k = rope(self.k_norm(self.k_proj(x).view(b, n, self.kv, self.d)), cos, sin)
        v = self.v_proj(x).view(b, n, self.kv, self.d)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [b, heads, n, D]
        if stats is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            o = self.explicit_attention(q, k, v, stats)
        o = o.transpose(1, 2)  # [b, n, h, D]
        if stats is not None:
            stats["max_abs_before"].append(o.abs().amax(-1))
        if self.gate_per_head:
            score = torch.sigmoid(g)
            o = o * score
            if stats is not None:
                stats["gate_mean"].append(score.mean(-1))
                stats["gate_below_0_1"].append((score < 0.1).float().mean(-1))
        elif stats is not None:
            stats["gate_mean"].append(torch.ones(b, n, self.h))
            stats["gate_below_0_1"].append(torch.zeros(b, n, self.h))
        if stats is not None:
            stats["max_abs_after"].append(o.abs().amax(-1))
        return self.o_proj(o.reshape(b, n, self.h * self.d))

    def explicit_attention(self, q, k, v, stats):
        group = self.h // self.kv
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        n = q.shape[2]
        s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(self.d)
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        prob = torch.softmax(s, dim=-1)
        stats["sink_share"].append(prob[..., 0].transpose(1, 2).float())  # [b, n, h]
        return (prob @ v.double()).float()


class Mlp(nn.Module):  # SwiGLU
    def __init__(self, hid, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hid, inter, bias=False)
        self.up_proj = nn.Linear(hid, inter, bias=False)
        self.down_proj = nn.Linear(inter, hid, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, gate):
        super().__init__()
        hid, eps = cfg["hidden"], cfg["rms_norm_eps"]
        self.input_norm, self.post_norm = RmsNorm(hid, eps), RmsNorm(hid, eps)
        self.attn = Attention(cfg, gate)
        self.mlp = Mlp(hid, cfg["intermediate"])

    def forward(self, x, cos, sin, stats=None):
        h = x + self.attn(self.input_norm(x), cos, sin, stats)
        return h + self.mlp(self.post_norm(h))


class ByteLm(nn.Module):
    def __init__(self, cfg, gate):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(VOCAB, cfg["hidden"])
        self.layers = nn.ModuleList(Layer(cfg, gate) for _ in range(cfg["layers"]))
        self.norm = RmsNorm(cfg["hidden"], cfg["rms_norm_eps"])

    def forward(self, tokens, stats=None):
        cos, sin = rope_tables(self.cfg, tokens.shape[1])
        x = self.embed(tokens)
        for layer in self.layers:
            if stats is not None:
                stats["max_abs_hidden"].append(x.abs().amax(-1).amax(-1))  # [b]
            x = layer(x, cos, sin, stats)
        if stats is not None:
            stats["max_abs_hidden"].append(x.abs().amax(-1).amax(-1))
        return self.norm(x) @ self.embed.weight.T


def initialise(model, seed):
    """Every tensor drawn in a fixed order from one generator, so that the models of different gate
    modes start from the same weights: the q rows of q_proj first, then its gate rows."""
    gen = torch.Generator().manual_seed(seed)
    std = 0.02
    with torch.no_grad():
        model.embed.weight.normal_(0, std, generator=gen)
        for layer in model.layers:
            a = layer.attn
            w = a.q_proj.weight.view(a.h, a.d + a.gate_per_head, -1)
            w[:, :a.d].normal_(0, std, generator=gen)
            for m in (a.k_proj, a.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj):
                m.weight.normal_(0, std, generator=gen)
            for m in (a.o_proj, layer.mlp.down_proj):
                m.weight.normal_(0, std / math.sqrt(2 * len(model.layers)), generator=gen)
        for layer in model.layers:  # the gate rows last, so the rest does not depend on them
            a = layer.attn
            if a.gate_per_head:
                gate_gen = torch.Generator().manual_seed(seed + 1)
                w = a.q_proj.weight.view(a.h, a.d + a.gate_per_head, -1)
                w[:, a.d:].normal_(0, std, generator=gate_gen)


def batches(data, cfg, steps, seed):
    """Windows of seq_len bytes at random offsets, the same for every gate mode: [steps, b, len]."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - cfg["seq_len"], size=(steps, cfg["batch"]))
    return starts


def window(data, starts, length):
    """BOS followed by `length` bytes from each start: [len(starts), length + 1]."""
    rows = np.stack([data[s:s + length] for s in starts]).astype(np.int64)
    tokens = torch.from_numpy(rows)
    return torch.cat([torch.full((len(starts), 1), BOS), tokens], dim=1)  # BOS + bytes


def evaluate(model, val, cfg):
    model.eval()
    with torch.no_grad():
        n = cfg["seq_len"]
        starts = np.arange(0, len(val) - n, n)[:cfg["val_windows"]]
        tokens = window(val, starts, n)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)).item()
    model.train()
    return loss


def round_weights_to_bf16(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def train(cfg, gate, train_data, val, args):
    torch.manual_seed(cfg["seed"])
    model = ByteLm(cfg, gate)
    initialise(model, cfg["seed"])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(0.9, 0.95))
    steps, warmup = cfg["steps"], cfg["warmup"]
    schedule = lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    starts = batches(train_data, cfg, steps, cfg["seed"])
    losses, val_losses, val_steps = [], [], []
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = cfg["lr"] * schedule(step)
        tokens = window(train_data, starts[step], cfg["seq_len"])
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % cfg["eval_every"] == 0 or step + 1 == steps:
            val_losses.append(evaluate(model, val, cfg))
            val_steps.append(step + 1)
            print(f"{gate:12s} step {step + 1:5d}/{steps}  loss {np.mean(losses[-50:]):.4f}  "
                  f"val {val_losses[-1]:.4f}  {time.time() - t0:7.1f} s", flush=True)
    seconds = time.time() - t0
    if args.weights == "bf16":
        round_weights_to_bf16(model)
    cfg["val_loss_stored"] = round(evaluate(model, val, cfg), 4)
    return model, losses, val_losses, val_steps, seconds


def export(model, gate, cfg, val, losses, val_losses, val_steps, seconds, args):
    model.eval()
    weight_type = torch.bfloat16 if args.weights == "bf16" else torch.float32
    tensors = {n.removesuffix(".weight"): p.detach().to(weight_type).contiguous()
               for n, p in model.named_parameters()}
    n = cfg["seq_len"]
    starts = np.arange(0, len(val) - n, n)[:cfg["report_windows"]]
    tokens = window(val, starts, n - 1)  # [rows, n]: BOS and n - 1 bytes, as in training
    stats = {k: [] for k in ("sink_share", "gate_mean", "gate_below_0_1", "max_abs_before",
                             "max_abs_after", "max_abs_hidden")}
    with torch.no_grad():
        logits = model(tokens, stats)
    tensors["validation.tokens"] = tokens[:, 1:].to(torch.uint8).contiguous()
    tensors["expected.logits"] = logits[0].float().contiguous()
    for k, v in stats.items():
        tensors["expected." + k] = torch.stack(v).float().contiguous()
    tensors["train.loss"] = torch.tensor(losses, dtype=torch.float32)
    tensors["train.val_loss"] = torch.tensor(val_losses, dtype=torch.float32)
    tensors["train.val_step"] = torch.tensor(val_steps, dtype=torch.int64)
    meta = {k: str(v) for k, v in cfg.items()}
    meta.update(gate_mode=gate, weights=args.weights, train_seconds=f"{seconds:.0f}",
                threads=str(torch.get_num_threads()),
                versions=f"torch {torch.__version__}, safetensors {safetensors.__version__}, "
                         f"numpy {np.__version__}, python {platform.python_version()}",
                text="King James Bible, Debian bible-kjv (bible -f), verses without references; "
                     "Revelation held out for validation")
    path = os.path.join(args.out, f"byte_lm_{gate}.safetensors")
    save_file(tensors, path, metadata=meta)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gates", default="none,elementwise", help="comma list: none, elementwise, headwise")
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512, help="tokens per window, BOS included")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--report-rows", type=int, default=4, help="validation rows exported")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--text", default="", help="the output of `bible -f Gen1:1-Rev22:21` (default: run it)")
    ap.add_argument("--weights", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = dict(hidden=128, layers=args.layers, num_q_heads=4, num_kv_heads=2, head_dim=32,
               rotary_dim=8, rope_theta=10000.0, intermediate=384, rms_norm_eps=1e-6,
               seq_len=args.seq_len, batch=args.batch, steps=args.steps, warmup=100, lr=args.lr,
               weight_decay=0.1, seed=20261206, eval_every=250, val_windows=32,
               report_windows=args.report_rows)
    train_data, val = load_text(args.text)
    print(f"text: {len(train_data)} training bytes, {len(val)} validation bytes", flush=True)
    for gate in args.gates.split(","):
        model, losses, val_losses, val_steps, seconds = train(cfg, gate, train_data, val, args)
        export(model, gate, cfg, val, losses, val_losses, val_steps, seconds, args)


if __name__ == "__main__":
    main()
