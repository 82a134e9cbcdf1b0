"""The benchmark shapes, read from bench/shapes.hpp (the one definition the C++ benchmarks use).

Shape: batch, q_heads, kv_heads, head_dim, q_len, kv_len, decode, hidden; causal mask aligned
bottom-right (query i sees keys 0 .. i + kv_len - q_len).
"""

import os
import re
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES_HPP = os.path.join(ROOT, "bench", "shapes.hpp")


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    q_heads: int
    kv_heads: int
    head_dim: int
    q_len: int
    kv_len: int
    decode: bool
    hidden: int

    def visible_pairs(self):
        """Query/key pairs the causal, bottom-right-aligned mask leaves visible."""
        offset = self.kv_len - self.q_len
        pairs = 0
        for i in range(self.q_len):
            pos = i + offset
            if pos >= 0:
                pairs += min(pos + 1, self.kv_len)
        return pairs

    def useful_flops(self):
        """4 * B * Hq * D per visible pair (Q.K and P.V), as the benchmarks count them."""
        return 4.0 * self.batch * self.q_heads * self.head_dim * self.visible_pairs()

    def kv_bytes(self):
        """K and V in f32."""
        return 2.0 * 4.0 * self.batch * self.kv_len * self.kv_heads * self.head_dim

    def projection_flops(self):
        """The block's projections around the attention (q + gate, k, v, o), per call."""
        q_width = self.q_heads * self.head_dim
        kv_width = self.kv_heads * self.head_dim
        rows = self.batch * self.q_len
        return 2.0 * rows * self.hidden * (2 * q_width + 2 * kv_width + q_width)


_ENTRY = re.compile(
    r'\{\s*"(\w+)"\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,'
    r"\s*(true|false)\s*,\s*(\d+)\s*\}"
)


def _lens(text, array):
    match = re.search(array + r"\[\]\s*=\s*\{([^}]*)\}", text)
    if not match:
        raise ValueError(f"{SHAPES_HPP}: no {array}")
    return [int(x) for x in re.findall(r"\d+", match.group(1))]


def load(path=SHAPES_HPP):
    """Returns (named shapes in order, sweep prefill lengths, sweep decode lengths, sweep_shape).

    sweep_shape(kind, length) builds the sweep's shape ("prefill": q_len = kv_len = length;
    "decode": q_len = 1, kv_len = length) with the heads of sweep_*_shape() in shapes.hpp.
    """
    with open(path) as f:
        text = f.read()
    named, sweep_heads = [], {}
    for m in _ENTRY.finditer(text):
        name, b, hq, hkv, d, q_len, kv_len, decode, hidden = m.groups()
        if name.startswith("sweep_"):
            sweep_heads[name] = (int(b), int(hq), int(hkv), int(d), int(hidden))
            continue
        named.append(
            Shape(name, int(b), int(hq), int(hkv), int(d), int(q_len), int(kv_len),
                  decode == "true", int(hidden)))
    if not named or set(sweep_heads) != {"sweep_prefill", "sweep_decode"}:
        raise ValueError(f"{SHAPES_HPP}: could not read the shape table")

    def sweep_shape(kind, length):
        b, hq, hkv, d, hidden = sweep_heads["sweep_" + kind]
        q_len = length if kind == "prefill" else 1
        return Shape(f"sweep_{kind}_{length}", b, hq, hkv, d, q_len, length, kind == "decode",
                     hidden)

    return (named, _lens(text, "kSweepPrefillLens"), _lens(text, "kSweepDecodeLens"),
            sweep_shape)
