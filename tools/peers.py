#!/usr/bin/env python3
"""Peers (optional, outside CI): the named shapes of bench/shapes.hpp, same threads, timed in other
engines, written as a JSON that `tools/report.py --peers <json>` adds as columns.

  /work/venv/bin/python tools/peers.py                      every engine this interpreter has
  python3 tools/peers.py --engines openvino --out build/report/peers_openvino.json

Engines (each skipped with a message when its package is missing; install from PyPI):
  torch     torch.nn.functional.scaled_dot_product_attention, [b, heads, len, d], GQA through
            enable_gqa=True (or --gqa repeat: K/V repeated per query head before timing), causal
            aligned bottom-right: is_causal for square shapes, no mask for one query token, an
            explicit bool mask (tril with diagonal kv_len - q_len) otherwise, since torch's
            is_causal is aligned top-left. The gate as torch ops: out * sigmoid(g).
  openvino  OpenVINO's ScaledDotProductAttention (opset 13) in a one-op model, f32 inference
            precision, INFERENCE_NUM_THREADS = threads; GQA by broadcasting K/V over the group
            axis, the same mask rule, the gate as Sigmoid and Multiply nodes in the same model.

Element types (--dtypes): f32 (the main table's columns); bf16 and f16 (torch only: q, k, v and
the gate in that type, the element-type table's columns beside our `sdpa/<gate>/<dtype>` rows).

Times: per call, median of 3 repetitions of at least --min-time seconds after one warm-up call;
calls longer than 1 s: the warm-up plus one timed call. Inputs uniform in [-1, 1).

torch from PyPI brings its CUDA libraries (a few GB, unused here): python3 -m venv /work/venv &&
/work/venv/bin/pip install torch openvino
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_shapes  # noqa: E402

GATES = ("none", "headwise", "elementwise")
DEFAULT_OUT = os.path.join(bench_shapes.ROOT, "build", "report", "peers.json")


def time_calls(call, min_time):
    """Median milliseconds per call."""
    start = time.perf_counter()
    call()  # warm-up: allocations, kernel selection, graph compilation caches
    first = time.perf_counter() - start
    if first >= 1.0:
        start = time.perf_counter()
        call()
        return 1e3 * (time.perf_counter() - start), 1
    calls = max(1, math.ceil(min_time / max(first, 1e-6)))
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls)
    return 1e3 * statistics.median(samples), 3


def bottom_right_causal(q_len, kv_len):
    """How each engine should mask: 'causal' (square), 'none' (one query) or 'explicit'."""
    if q_len == kv_len:
        return "causal"
    if q_len == 1:
        return "none"  # the one query sits at position kv_len - 1 and sees every key
    return "explicit"


# ------------------------------------------------------------------------------------- torch


def torch_engine(gqa_mode):
    import torch
    import torch.nn.functional as F

    def make(shape, gate, threads, dtype):
        torch.set_num_threads(threads)
        b, hq, hkv, d = shape.batch, shape.q_heads, shape.kv_heads, shape.head_dim
        gen = torch.Generator().manual_seed(1)
        element = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]

        def uniform(*size):
            return (torch.rand(*size, generator=gen) * 2 - 1).to(element)

        q = uniform(b, hq, shape.q_len, d)
        k = uniform(b, hkv, shape.kv_len, d)
        v = uniform(b, hkv, shape.kv_len, d)
        if gqa_mode == "repeat" and hq != hkv:
            k = k.repeat_interleave(hq // hkv, dim=1).contiguous()
            v = v.repeat_interleave(hq // hkv, dim=1).contiguous()
        g = uniform(b, hq, shape.q_len, 1 if gate == "headwise" else d)
        rule = bottom_right_causal(shape.q_len, shape.kv_len)
        mask = None
        if rule == "explicit":
            mask = torch.ones(shape.q_len, shape.kv_len, dtype=torch.bool).tril(
                diagonal=shape.kv_len - shape.q_len)
        kwargs = {"attn_mask": mask, "is_causal": rule == "causal"}
        if gqa_mode == "enable_gqa" and hq != hkv:
            kwargs["enable_gqa"] = True

        def call():
            with torch.inference_mode():
                out = F.scaled_dot_product_attention(q, k, v, **kwargs)
                if gate != "none":
                    out = out * torch.sigmoid(g)
            return out

        return call

    context = {"torch": torch.__version__, "torch_gqa": gqa_mode,
               "torch_mkldnn": torch.backends.mkldnn.is_available()}
    return make, context


# ---------------------------------------------------------------------------------- openvino


def openvino_engine():
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    core = ov.Core()

    def make(shape, gate, threads, dtype):
        if dtype != "f32":
            raise NotImplementedError("openvino: f32 only here")
        b, hq, hkv, d = shape.batch, shape.q_heads, shape.kv_heads, shape.head_dim
        group = hq // hkv
        # [b, kv_heads, group, len, d]: K/V broadcast over the group axis (GQA without copies).
        q = ops.parameter([b, hkv, group, shape.q_len, d], np.float32, name="q")
        k = ops.parameter([b, hkv, 1, shape.kv_len, d], np.float32, name="k")
        v = ops.parameter([b, hkv, 1, shape.kv_len, d], np.float32, name="v")
        params = [q, k, v]
        rule = bottom_right_causal(shape.q_len, shape.kv_len)
        if rule == "explicit":
            mask = np.tril(np.ones((shape.q_len, shape.kv_len), dtype=bool),
                           k=shape.kv_len - shape.q_len)
            out = ops.scaled_dot_product_attention(q, k, v, ops.constant(mask), causal=False)
        else:
            out = ops.scaled_dot_product_attention(q, k, v, causal=rule == "causal")
        if gate != "none":
            g = ops.parameter([b, hkv, group, shape.q_len, 1 if gate == "headwise" else d],
                              np.float32, name="g")
            params.append(g)
            out = ops.multiply(out, ops.sigmoid(g))
        model = ov.Model([out], params, "gated_sdpa")
        compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                     "INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        rng = np.random.default_rng(1)
        for i, p in enumerate(params):
            shape_p = tuple(p.get_output_partial_shape(0).to_shape())
            request.set_input_tensor(i, ov.Tensor(
                rng.uniform(-1, 1, size=shape_p).astype(np.float32)))

        def call():
            request.infer()

        return call

    return make, {"openvino": ov.get_version()}


ENGINES = {"torch": None, "openvino": None}
ENGINE_DTYPES = {"torch": ("f32", "bf16", "f16"), "openvino": ("f32",)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--engines", default="torch,openvino",
                        help="comma-separated: torch, openvino")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--shapes", help="comma-separated shape names (default: all named)")
    parser.add_argument("--gates", default=",".join(GATES))
    parser.add_argument("--gqa", choices=("enable_gqa", "repeat"), default="enable_gqa",
                        help="torch: enable_gqa=True, or K/V repeated per query head beforehand")
    parser.add_argument("--dtypes", default="f32",
                        help="comma-separated: f32, bf16, f16 (bf16/f16: ungated, torch only)")
    parser.add_argument("--min-time", type=float, default=0.2)
    args = parser.parse_args()

    named = bench_shapes.load()[0]
    if args.shapes:
        wanted = args.shapes.split(",")
        named = [s for s in named if s.name in wanted]
    threads_list = [int(t) for t in args.threads.split(",")]
    gates = args.gates.split(",")

    engines, context = [], {"python": platform.python_version()}
    for name in args.engines.split(","):
        try:
            if name == "torch":
                make, ctx = torch_engine(args.gqa)
            elif name == "openvino":
                make, ctx = openvino_engine()
            else:
                sys.exit(f"peers: unknown engine {name}")
        except ImportError as e:
            print(f"peers: skipping {name}: {e} (pip install {name} in this interpreter, "
                  f"{sys.executable})", file=sys.stderr)
            continue
        engines.append((name, make))
        context.update(ctx)
    if not engines:
        sys.exit("peers: no engine available")

    results = []
    start = time.monotonic()
    runs = [(dtype, gate) for dtype in args.dtypes.split(",")
            for gate in (gates if dtype == "f32" else ["none"])]
    for name, make in engines:
        for shape in named:
            for threads in threads_list:
                for dtype, gate in runs:
                    if dtype not in ENGINE_DTYPES[name]:
                        continue
                    entry = {"engine": name, "case": shape.name, "threads": threads, "gate": gate,
                             "dtype": dtype}
                    try:
                        ms, reps = time_calls(make(shape, gate, threads, dtype), args.min_time)
                        entry.update(ms=round(ms, 4), reps=reps)
                    except Exception as e:  # an engine that cannot run a shape: say so, go on
                        entry.update(ms=None, error=f"{type(e).__name__}: {e}"[:300])
                    results.append(entry)
                    shown = f"{entry['ms']:.3f} ms" if entry.get("ms") is not None else \
                        entry["error"]
                    print(f"peers: {name} {shape.name} threads:{threads} {dtype} {gate}: {shown}",
                          file=sys.stderr, flush=True)
    context["wall_s"] = round(time.monotonic() - start, 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"context": context, "results": results}, f, indent=1)
    print(f"peers: wrote {args.out} ({context['wall_s']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
