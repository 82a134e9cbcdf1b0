#!/usr/bin/env python3
"""Writes tests/data/qwen3_next_attention.safetensors: transformers' own Qwen3NextAttention, run in
f32 on a small random config, so the C++ tests can check the block against an implementation this
project did not write.

Not needed by the build, the tests or CI (they only read the committed file). To regenerate:

    python3 -m venv /work/venv
    /work/venv/bin/pip install torch transformers safetensors
    /work/venv/bin/python tools/make_qwen3_next_fixtures.py            # writes tests/data/...

The attention layer is called exactly as Qwen3NextModel calls it: position embeddings from
Qwen3NextRotaryEmbedding, the mask from masking_utils.create_causal_mask (built before the cache
grows, as the model does), eager attention and a DynamicCache, so prefill and decode both take the
library's own paths.

Tensors (all f32 unless noted; `pos` tensors are int64):
  q_proj.weight [2*H*D, hidden]   per query head h: rows [q_h (D) | gate_h (D)]
  k_proj.weight, v_proj.weight [Hkv*D, hidden]; o_proj.weight [hidden, H*D]
  q_norm.weight, k_norm.weight [D]  (zero-centred: the norm multiplies by 1 + w)
  Single sequence, step s = 0 (prefill of 37 tokens), 1..3 (one token each), one cache:
    step{s}.hidden_states [1, len, hidden], step{s}.position_ids [1, len], step{s}.output [1, len, hidden]
  Batch of two sequences: sequence 0 is the single sequence above (its prefill is step0); sequence 1
  has its own prefill of 20 tokens; then 3 decode steps of one token per sequence, positions
  [37 + i, 20 + i]. transformers runs each sequence with its own cache (no padding); the outputs
  are stacked so a batched decode with per-sequence cache lengths can be checked against them:
    batch.seq1_prefill.{hidden_states,position_ids,output} [1, 20, ...]
    batch.decode{i}.{hidden_states,position_ids,output} [2, 1, ...], i = 0..2
The config and the versions used are in the file's __metadata__ (strings).
"""

import argparse
import os
import platform
import sys

import safetensors
import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3NextConfig
from transformers.cache_utils import DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.models.qwen3_next.modeling_qwen3_next import (
    Qwen3NextAttention,
    Qwen3NextRotaryEmbedding,
)

SEED = 20251201
HIDDEN = 256
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
PARTIAL_ROTARY_FACTOR = 0.25
ROPE_THETA = 10000.0
RMS_NORM_EPS = 1e-6
PREFILL = 37
DECODE_STEPS = 3
SEQ1_PREFILL = 20


def make_config():
    config = Qwen3NextConfig(
        vocab_size=32,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=1,
        layer_types=["full_attention"],
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        rms_norm_eps=RMS_NORM_EPS,
        max_position_embeddings=1024,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": ROPE_THETA,
            "partial_rotary_factor": PARTIAL_ROTARY_FACTOR,
        },
        attention_bias=False,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    return config


def make_attention(config, generator):
    attention = Qwen3NextAttention(config, layer_idx=0).to(torch.float32).eval()
    with torch.no_grad():
        for linear in (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj):
            fan_in = linear.weight.shape[1]
            # std 1/sqrt(fan_in): projections of unit-variance inputs have unit variance, so the
            # gate's sigmoid and the softmax both see a real spread of values.
            linear.weight.copy_(
                torch.randn(linear.weight.shape, generator=generator) / fan_in**0.5
            )
        for norm in (attention.q_norm, attention.k_norm):
            # Non-zero so that the (1 + w) of the zero-centred norm matters: 1 + w in [0.5, 1.5].
            norm.weight.copy_(torch.rand(norm.weight.shape, generator=generator) - 0.5)
    return attention


class Runner:
    """One sequence through Qwen3NextAttention with its own DynamicCache, called as the model does."""

    def __init__(self, config, attention, rotary):
        self.config, self.attention, self.rotary = config, attention, rotary
        self.cache = DynamicCache(config=config)

    def step(self, hidden_states, position_ids):
        with torch.no_grad():
            mask = create_causal_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=None,
                cache=self.cache,
                position_ids=position_ids,
            )
            position_embeddings = self.rotary(hidden_states, position_ids)
            output, _ = self.attention(hidden_states, position_embeddings, mask, cache=self.cache)
        return output


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_out = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
        "qwen3_next_attention.safetensors",
    )
    parser.add_argument("--out", default=os.path.normpath(default_out))
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(SEED)
    config = make_config()
    attention = make_attention(config, generator)
    rotary = Qwen3NextRotaryEmbedding(config)

    tensors = {name: p.detach().clone().contiguous() for name, p in attention.state_dict().items()}
    expected_names = {f"{m}.weight" for m in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")}
    assert set(tensors) == expected_names, sorted(tensors)

    def randn(*shape):
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    # Single sequence: prefill, then decode steps through the same cache.
    seq0 = Runner(config, attention, rotary)
    lengths = [PREFILL] + [1] * DECODE_STEPS
    start = 0
    for s, length in enumerate(lengths):
        x = randn(1, length, HIDDEN)
        positions = torch.arange(start, start + length, dtype=torch.int64)[None, :]
        y = seq0.step(x, positions)
        tensors[f"step{s}.hidden_states"] = x
        tensors[f"step{s}.position_ids"] = positions
        tensors[f"step{s}.output"] = y.contiguous()
        start += length

    # Sanity checks of the calling convention (not of the C++ side): the prefill is causal (its
    # first 10 outputs do not see the later tokens), and a decode step equals the last row of a
    # prefill of the same tokens.
    check = Runner(config, attention, rotary)
    head = check.step(tensors["step0.hidden_states"][:, :10], torch.arange(10)[None, :])
    torch.testing.assert_close(head, tensors["step0.output"][:, :10], rtol=1e-5, atol=1e-6)
    whole = Runner(config, attention, rotary)
    all_x = torch.cat([tensors[f"step{s}.hidden_states"] for s in range(len(lengths))], dim=1)
    all_y = whole.step(all_x, torch.arange(all_x.shape[1])[None, :])
    torch.testing.assert_close(all_y[:, -1:], tensors[f"step{len(lengths) - 1}.output"],
                               rtol=1e-5, atol=1e-6)

    # Batch of two sequences: sequence 0 replays the single sequence's prefill with a fresh cache.
    batch0 = Runner(config, attention, rotary)
    batch0.step(tensors["step0.hidden_states"], tensors["step0.position_ids"])
    batch1 = Runner(config, attention, rotary)
    x1 = randn(1, SEQ1_PREFILL, HIDDEN)
    p1 = torch.arange(SEQ1_PREFILL, dtype=torch.int64)[None, :]
    tensors["batch.seq1_prefill.hidden_states"] = x1
    tensors["batch.seq1_prefill.position_ids"] = p1
    tensors["batch.seq1_prefill.output"] = batch1.step(x1, p1).contiguous()
    for i in range(DECODE_STEPS):
        x = randn(2, 1, HIDDEN)
        positions = torch.tensor([[PREFILL + i], [SEQ1_PREFILL + i]], dtype=torch.int64)
        y0 = batch0.step(x[0:1], positions[0:1])
        y1 = batch1.step(x[1:2], positions[1:2])
        tensors[f"batch.decode{i}.hidden_states"] = x
        tensors[f"batch.decode{i}.position_ids"] = positions
        tensors[f"batch.decode{i}.output"] = torch.cat([y0, y1], dim=0).contiguous()

    metadata = {
        "generator": "tools/make_qwen3_next_fixtures.py",
        "module": "transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextAttention",
        "attn_implementation": "eager",
        "dtype": "float32",
        "seed": str(SEED),
        "hidden_size": str(HIDDEN),
        "num_attention_heads": str(HEADS),
        "num_key_value_heads": str(KV_HEADS),
        "head_dim": str(HEAD_DIM),
        "partial_rotary_factor": repr(PARTIAL_ROTARY_FACTOR),
        "rope_theta": repr(ROPE_THETA),
        "rms_norm_eps": repr(RMS_NORM_EPS),
        "prefill_length": str(PREFILL),
        "decode_steps": str(DECODE_STEPS),
        "seq1_prefill_length": str(SEQ1_PREFILL),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "python_version": platform.python_version(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_file(tensors, args.out, metadata=metadata)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(tensors)} tensors, {size} bytes")
    for key in ("torch_version", "transformers_version", "safetensors_version", "python_version"):
        print(f"  {key} = {metadata[key]}")
    for s in range(len(lengths)):
        print(f"  step{s}.output max |y| = {tensors[f'step{s}.output'].abs().max().item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
