#!/usr/bin/env python3
"""Gated vs ungated attention: runs gated_attention_bench and prints one table.

  python3 tools/report.py                 quick mode (about 3 minutes on 2 cores)
  python3 tools/report.py --full          every shape, sweep point and thread count, more repetitions
  python3 tools/report.py --peers peers.json       adds the columns of tools/peers.py
  python3 tools/report.py --json-in build/report/gated_attention_bench.json --markdown
                                          re-renders a finished run (no benchmarks) as Markdown
  python3 tools/report.py --json-in ... --update-readme
                                          writes that section into docs/performance.md, the PNG
                                          to docs/ and the summary rows into README.md

Writes into --out (default build/report/): gated_attention_bench.json (Google Benchmark's JSON of
every pass, merged, plus a "report" object), report.txt, report.md, gated_vs_ungated.png (needs
python3-matplotlib) and bench_console.txt (the benchmark binary's own output).

Rows (f32, causal, bottom-right aligned): the named shapes of bench/shapes.hpp (sdpa/...), the
sequence-length sweeps over Qwen3-Next's heads (sweep/prefill/..., sweep/decode/...) and, when the
binary has them, block/... rows. Times are medians over repetitions of separately timed rows.
The gate's overhead (the ovh columns and the plot's overhead marks) is the paired counter
gate_overhead/<gate>/f32/<shape>/threads:<n> (ratio: the median of back-to-back gated / ungated
call times, minus 1), because separately timed rows drift by 10-20% on shared hosts; a row
without a paired counter (block/...) shows gated / ungated of its separate times, marked *.
GFLOP/s, GB/s and their % columns are those of the elementwise-gated run (Qwen3-Next's gate),
against peak/fma_f32 and peak/read_bw/<shape> measured by the same binary with the same threads.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_shapes  # noqa: E402

ROOT = bench_shapes.ROOT
DEFAULT_BENCH = os.path.join(ROOT, "build", "release", "bench", "gated_attention_bench")
DEFAULT_OUT = os.path.join(ROOT, "build", "report")
JSON_NAME = "gated_attention_bench.json"
PNG_NAME = "gated_vs_ungated.png"
README_PNG = os.path.join("docs", "performance.png")
PERFORMANCE_MD = os.path.join("docs", "performance.md")
# --update-readme replaces what lies between these markers: the whole generated section in
# docs/performance.md, and the summary rows in README.md (skipped where README has no markers).
TABLE_BEGIN = "<!-- report.py --update-readme: begin -->"
TABLE_END = "<!-- report.py --update-readme: end -->"
SUMMARY_BEGIN = "<!-- report.py --update-readme summary: begin -->"
SUMMARY_END = "<!-- report.py --update-readme summary: end -->"
GATES = ("none", "headwise", "elementwise")

# Per-iteration time estimates only sort cases into passes (and print a forecast): a prefill case
# runs near this rate per thread, a decode case streams K/V near this bandwidth.
EST_FLOPS_PER_THREAD = 130e9
EST_BYTES_PER_SECOND = 10e9
SHORT_S = 0.25  # below: timed for min_time, median of several repetitions
LONG_S = 1.2  # from SHORT_S to here: one iteration per repetition; above: one iteration in quick
PAIR_MIN_TIME = 0.2  # quick mode's gate_overhead pairs run at least this long (short: 5-30 pairs)

NAME = re.compile(r"^(sdpa|block)/(none|headwise|elementwise)/f32/(\w+)/threads:(\d+)$")
SWEEP = re.compile(r"^sweep/(prefill|decode)/(none|headwise|elementwise)/f32/(\d+)/threads:(\d+)$")
PEAK_FMA = re.compile(r"^peak/fma_f32/threads:(\d+)$")
PEAK_BW = re.compile(r"^peak/read_bw/(\w+)/threads:(\d+)$")
PAIR = re.compile(r"^gate_overhead/(headwise|elementwise)/f32/(\w+)/threads:(\d+)$")
SWEEP_SHAPE = re.compile(r"^sweep_(prefill|decode)_(\d+)$")
# Element types: paired speedup against f32 and the read share, per dtype token.
DTYPE = re.compile(r"^(dtype_speedup|decode_read_share)/([\w-]+)/(\w+)/threads:(\d+)$")
# Quick mode's element-type rows: these dtypes on the decode shapes, the bf16 ones on this
# prefill shape.
QUICK_DTYPES = ("f32-kvbf16", "f32-kvi8", "f32-kvbf16-storage", "f32-kvi8-storage", "bf16",
                "bf16-storage")
QUICK_DTYPE_PREFILL = "qwen3next_prefill_4k"
# Ungated calls with every tensor in bf16 or f16: the element-type table's time beside the peers'.
TYPED = re.compile(r"^sdpa/none/(bf16|f16)/(\w+)/threads:(\d+)$")
# Paged K/V: the paired paged / contiguous ratio per dtype, shape, page size and threads.
PAGED = re.compile(r"^paged_overhead/([\w-]+)/(\w+)/page:(\d+)/threads:(\d+)$")
# Quick mode's paged rows: every page size on the decode shapes and these prefill shapes.
QUICK_PAGED_PREFILL = ("dense1p7b_prefill_2k", "gpt2_prefill_1k")
# Packed varlen batches: the paired per-entry calls / one packed call, per dtype, batch, threads.
VARLEN = re.compile(r"^sdpa_varlen/([\w-]+)/(mixed|many_small)/threads:(\d+)$")
VARLEN_PAIR_SECONDS = {"mixed": 0.5, "many_small": 0.1}  # per pair, at 1 thread
VARLEN_MIN_TIME = 3.0  # the varlen pairs run at least this long (the mixed pairs take 0.25-0.5 s)
# The block with Eigen's projections / with the build's default backend (OpenBLAS), paired.
PROJECTION = re.compile(r"^projection_backend_speedup/(none|headwise|elementwise)/f32/(\w+)/"
                        r"threads:(\d+)$")
# The block with f32 weights / with the same weights in bf16, paired.
WEIGHTS = re.compile(r"^weight_speedup/(none|headwise|elementwise)/(bf16w[\w-]*)/(\w+)/"
                     r"threads:(\d+)$")
# The block rows run from the binary built without -march (--portable-bench).
PORTABLE_BLOCK = re.compile(r"^block/elementwise/f32/(\w+)/threads:(\d+)$")


# ----------------------------------------------------------------------------------- selection


class Case:
    """One benchmark name, what it measures and its estimated seconds per iteration.

    group: sdpa, block, sweep/prefill, sweep/decode, peak, pair (a gate_overhead row, whose
    target is the (group, case) of the table row it gives the gate's overhead of), or dtype (a
    dtype_speedup or decode_read_share row, its target that prefix, its gate the dtype)."""

    def __init__(self, name, group, case, gate, threads, shape, seconds, target=None):
        self.name, self.group, self.case, self.gate = name, group, case, gate
        self.threads, self.shape, self.seconds = threads, shape, seconds
        self.target = target


def estimate_seconds(shape, threads, block):
    if shape.decode:
        seconds = shape.kv_bytes() / EST_BYTES_PER_SECOND
        if block:  # the weights stream too
            seconds += 4.0 * shape.projection_flops() / 2.0 / EST_BYTES_PER_SECOND
        return seconds
    flops = shape.useful_flops() + (shape.projection_flops() if block else 0.0)
    return flops / (EST_FLOPS_PER_THREAD * threads)


def classify(names):
    """Cases of the table, keyed by benchmark name (peaks and other rows have group 'peak'/None)."""
    named, _, _, sweep_shape = bench_shapes.load()
    by_name = {s.name: s for s in named}
    cases = {}
    for n in names:
        m = NAME.match(n)
        if m and m.group(3) in by_name:
            op, gate, shape_name, threads = m.group(1), m.group(2), m.group(3), int(m.group(4))
            shape = by_name[shape_name]
            cases[n] = Case(n, op, shape_name, gate, threads, shape,
                            estimate_seconds(shape, threads, op == "block"))
            continue
        m = SWEEP.match(n)
        if m:
            kind, gate, length, threads = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
            shape = sweep_shape(kind, length)
            cases[n] = Case(n, "sweep/" + kind, str(length), gate, threads, shape,
                            estimate_seconds(shape, threads, False))
            continue
        m = PAIR.match(n)
        if m:
            gate, shape_name, threads = m.group(1), m.group(2), int(m.group(3))
            sweep = SWEEP_SHAPE.match(shape_name)
            if shape_name in by_name:
                target, shape = ("sdpa", shape_name), by_name[shape_name]
            elif sweep:
                target = ("sweep/" + sweep.group(1), sweep.group(2))
                shape = sweep_shape(sweep.group(1), int(sweep.group(2)))
            else:
                continue
            # Each iteration is a pair: an ungated and a gated call.
            cases[n] = Case(n, "pair", target[1], gate, threads, shape,
                            2.0 * estimate_seconds(shape, threads, False), target)
            continue
        m = DTYPE.match(n)
        if m and m.group(3) in by_name:
            shape = by_name[m.group(3)]
            # Each iteration is a pair: an f32 call and one of the type (or a plain read).
            cases[n] = Case(n, "dtype", m.group(3), m.group(2), int(m.group(4)), shape,
                            2.0 * estimate_seconds(shape, int(m.group(4)), False), m.group(1))
            continue
        m = PAGED.match(n)
        if m and m.group(2) in by_name:
            shape, threads = by_name[m.group(2)], int(m.group(4))
            # Each iteration is a pair: a contiguous call and a paged one.
            cases[n] = Case(n, "paged", m.group(2), m.group(1), threads, shape,
                            2.0 * estimate_seconds(shape, threads, False), int(m.group(3)))
            continue
        m = PROJECTION.match(n)
        w = WEIGHTS.match(n)
        case, threads = (m.group(2), m.group(3)) if m else (w.group(3), w.group(4)) if w else ("", 0)
        if case in by_name:
            shape, threads = by_name[case], int(threads)
            # Each iteration is a pair: the block with each backend, or each weight type.
            cases[n] = Case(n, "projection" if m else "weights", case, (m or w).group(1), threads,
                            shape, 2.0 * estimate_seconds(shape, threads, True))
            continue
        m = VARLEN.match(n)
        if m:
            threads = int(m.group(3))
            cases[n] = Case(n, "varlen", m.group(2), m.group(1), threads, None,
                            VARLEN_PAIR_SECONDS[m.group(2)] / threads)
            continue
        m = TYPED.match(n)
        if m and m.group(2) in by_name:
            shape = by_name[m.group(2)]
            cases[n] = Case(n, "typed", m.group(2), m.group(1), int(m.group(3)), shape,
                            estimate_seconds(shape, int(m.group(3)), False))
            continue
        m = PEAK_FMA.match(n) or PEAK_BW.match(n)
        if m:
            cases[n] = Case(n, "peak", n, None, int(m.groups()[-1]), None, 0.05)
    return cases


def sweep_twins():
    """{sweep benchmark name without threads: the sdpa name of a named shape with the same
    problem}: a quick run times such a sweep point once, under the named shape's name."""
    named, prefill_lens, decode_lens, sweep_shape = bench_shapes.load()

    def dims(s):
        return (s.batch, s.q_heads, s.kv_heads, s.head_dim, s.q_len, s.kv_len)

    twins = {}
    for kind, lens in (("prefill", prefill_lens), ("decode", decode_lens)):
        for length in lens:
            for shape in named:
                if dims(shape) == dims(sweep_shape(kind, length)):
                    for g in GATES:
                        twins[f"sweep/{kind}/{g}/f32/{length}"] = f"sdpa/{g}/f32/{shape.name}"
                    for g in GATES[1:]:
                        twins[f"gate_overhead/{g}/f32/sweep_{kind}_{length}"] = (
                            f"gate_overhead/{g}/f32/{shape.name}")
    return twins


def plan(cases, full):
    """Passes: (label, repetitions, min_time, [cases]).

    quick: every named shape with 1 and 2 threads; the sweeps with 2 threads, prefill up to 8K,
    decode at every other length (4x apart), points that equal a named shape taken from its row;
    block rows whose iteration is estimated under LONG_S; the gate_overhead pairs of those sdpa
    and sweep rows. full: everything, more repetitions. The pairs run in a pass of their own: their
    counter is already a median over the pairs of one repetition, so quick mode runs each once,
    for at least PAIR_MIN_TIME seconds (the long prefill cases: one pair).
    """
    quick_prefill_max = 8192
    _, _, decode_lens, _ = bench_shapes.load()
    quick_decode_lens = {str(n) for n in decode_lens[::2]} | {str(decode_lens[-1])}
    twins = sweep_twins()
    twin_decode_lens = {k.rsplit("/", 1)[1] for k in twins if k.startswith("sweep/decode/")}
    sweep_threads = 2
    chosen, pairs, varlen = [], [], []
    for c in cases.values():
        if c.group == "varlen":
            varlen.append(c)
            continue
        if c.group == "typed":
            if full or (c.gate in QUICK_DTYPES
                        and (c.shape.decode or c.case == QUICK_DTYPE_PREFILL)):
                chosen.append(c)
            continue
        if c.group == "paged":
            if full or c.shape.decode or c.case in QUICK_PAGED_PREFILL:
                pairs.append(c)
            continue
        if c.group in ("projection", "weights"):
            if full or c.seconds < 2.0 * LONG_S:  # the block rows quick mode runs
                pairs.append(c)
            continue
        if c.group == "dtype":
            if full or (c.gate in QUICK_DTYPES
                        and (c.shape.decode or (c.case == QUICK_DTYPE_PREFILL
                                                and c.gate.startswith("bf16")
                                                and c.target == "dtype_speedup"))):
                pairs.append(c)
            continue
        if c.group == "pair":
            group, case = c.target
            if not full and group.startswith("sweep/"):
                if c.threads != sweep_threads:
                    continue
                if group == "sweep/prefill" and int(case) > quick_prefill_max:
                    continue
                if group == "sweep/decode" and case not in quick_decode_lens:
                    continue
                base, _, threads = c.name.rpartition("/")
                if base in twins and f"{twins[base]}/{threads}" in cases:
                    continue
            pairs.append(c)
        elif full:
            chosen.append(c)
        elif c.group == "peak":
            m = PEAK_BW.match(c.name)
            if m and m.group(1).startswith("sweep_decode_") and (
                    c.threads != sweep_threads
                    or m.group(1)[len("sweep_decode_"):] not in quick_decode_lens | twin_decode_lens):
                continue
            chosen.append(c)
        elif c.group.startswith("sweep/"):
            if c.threads != sweep_threads:
                continue
            if c.group == "sweep/prefill" and int(c.case) > quick_prefill_max:
                continue
            if c.group == "sweep/decode" and c.case not in quick_decode_lens:
                continue
            base, _, threads = c.name.rpartition("/")
            if base in twins and f"{twins[base]}/{threads}" in cases:
                continue
            chosen.append(c)
        elif c.group == "block" and c.seconds >= LONG_S:
            continue
        else:
            chosen.append(c)
    short = [c for c in chosen if c.seconds < SHORT_S]
    medium = [c for c in chosen if SHORT_S <= c.seconds < LONG_S]
    long = [c for c in chosen if c.seconds >= LONG_S]
    if full:
        return [("short", 5, 0.5, short), ("medium", 3, 0.01, medium), ("long", 3, 0.01, long),
                ("paired", 3, 1.0, pairs), ("varlen", 3, VARLEN_MIN_TIME, varlen)]
    return [("short", 3, 0.05, short), ("medium", 3, 0.01, medium), ("long", 1, 0.01, long),
            ("paired", 1, PAIR_MIN_TIME, pairs), ("varlen", 1, VARLEN_MIN_TIME, varlen)]


def forecast(reps, min_time, cases):
    total = 0.0
    for c in cases:
        if c.seconds >= min_time:  # one iteration per repetition
            total += reps * (c.seconds + 0.1)  # + input set-up
        else:  # a 1-iteration probe, then runs of at least min_time
            total += c.seconds + reps * min_time * 1.4 + 0.1 * (reps + 1)
    return total


def list_benchmarks(bench):
    out = subprocess.run([bench, "--benchmark_list_tests=true"], check=True,
                         capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def run_passes(bench, passes, out_dir, console_mode="w"):
    """Runs each pass (one process, repetitions interleaved at random); returns merged JSON.
    console_mode "a" appends the binary's output to that of earlier passes."""
    merged = {"context": None, "benchmarks": []}
    pass_info = []
    console_path = os.path.join(out_dir, "bench_console.txt")
    with open(console_path, console_mode) as console:
        for label, reps, min_time, cases in passes:
            if not cases:
                continue
            # Google Benchmark's regex rejects the escaped '-' that re.escape writes.
            pattern = "^(" + "|".join(re.escape(c.name).replace("\\-", "-") for c in cases) + ")$"
            pass_json = os.path.join(out_dir, f"pass_{label}.json")
            cmd = [bench, "--benchmark_filter=" + pattern, f"--benchmark_repetitions={reps}",
                   f"--benchmark_min_time={min_time}",
                   "--benchmark_enable_random_interleaving=true", "--benchmark_color=false",
                   "--benchmark_out=" + pass_json, "--benchmark_out_format=json"]
            print(f"report: pass {label}: {len(cases)} benchmarks x {reps} repetitions, "
                  f"forecast ~{forecast(reps, min_time, cases):.0f} s", file=sys.stderr, flush=True)
            console.write(f"== pass {label}: {len(cases)} benchmarks, repetitions {reps}, "
                          f"min_time {min_time}\n")
            console.flush()
            start = time.monotonic()
            proc = subprocess.run(cmd, stdout=console, stderr=subprocess.STDOUT)
            wall = time.monotonic() - start
            print(f"report:   done in {wall:.0f} s", file=sys.stderr, flush=True)
            if proc.returncode != 0:
                sys.exit(f"report: {os.path.basename(bench)} exited with {proc.returncode}; "
                         f"see {console_path}")
            with open(pass_json) as f:
                data = json.load(f)
            os.remove(pass_json)
            if merged["context"] is None:
                merged["context"] = data.get("context", {})
            merged["benchmarks"].extend(data.get("benchmarks", []))
            pass_info.append({"label": label, "repetitions": reps, "min_time": min_time,
                              "benchmarks": len(cases), "wall_s": round(wall, 1)})
    return merged, pass_info


def run_portable_pass(bench, passes, out_dir):
    """The main passes' elementwise block rows, from the binary built without -march."""
    if not os.access(bench, os.X_OK):
        sys.exit(f"report: no benchmark binary at {bench}; build it with `cmake --preset "
                 "release-portable && cmake --build --preset release-portable --target "
                 "gated_attention_bench`")
    chosen = [(label, reps, min_time, [c for c in cases if PORTABLE_BLOCK.match(c.name)])
              for label, reps, min_time, cases in passes]
    data, info = run_passes(bench, [(f"{label}-portable", reps, min_time, cases)
                                    for label, reps, min_time, cases in chosen], out_dir, "a")
    return data["benchmarks"], info


# ------------------------------------------------------------------------------------ results

TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def medians(benchmarks):
    """run_name -> {ms, flops, bytes_per_second, label, reps, error} over iteration rows."""
    rows = {}
    for b in benchmarks:
        if b.get("run_type", "iteration") != "iteration":
            continue
        rows.setdefault(b.get("run_name", b["name"]), []).append(b)
    result = {}
    for name, runs in rows.items():
        errors = [r.get("error_message", "error") for r in runs if r.get("error_occurred")]
        ok = [r for r in runs if not r.get("error_occurred")]
        entry = {"reps": len(ok), "label": (ok or runs)[0].get("label", ""),
                 "error": errors[0] if errors else None}
        if ok:
            entry["ms"] = statistics.median(r["real_time"] * TO_MS[r.get("time_unit", "ns")]
                                            for r in ok)
            for counter in ("flops", "bytes_per_second", "ratio", "speedup", "share",
                            "varlen_speedup", "packed_ms"):
                if counter in ok[0]:
                    entry[counter] = statistics.median(r[counter] for r in ok)
        result[name] = entry
    return result


def load_peers(paths):
    """From the JSON files of tools/peers.py: {(case, threads): {engine: {gate: ms}}} of the f32
    runs, the engines in order, their versions, and {(case, threads, dtype): {engine: ms}} of the
    other element types (ungated)."""
    table, engines, context, typed = {}, [], {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context.update({k: v for k, v in data.get("context", {}).items()
                        if k not in ("python", "wall_s")})
        for r in data.get("results", []):
            if r.get("ms") is None:
                continue
            if r.get("dtype", "f32") != "f32":
                typed.setdefault((r["case"], int(r["threads"]), r["dtype"]), {})[
                    r["engine"]] = r["ms"]
                continue
            if r["engine"] not in engines:
                engines.append(r["engine"])
            table.setdefault((r["case"], int(r["threads"])), {}).setdefault(r["engine"], {})[
                r["gate"]] = r["ms"]
    return table, engines, context, typed


def build_rows(data, peers):
    """The table: header and rows of strings, plus the numeric series the plot needs."""
    values = medians(data["benchmarks"])
    sweep_threads = {(m.group(1), int(m.group(4))) for m in map(SWEEP.match, values) if m}
    for sweep_base, sdpa_base in sweep_twins().items():
        kind = "prefill" if "prefill" in sweep_base else "decode"
        for kind_run, threads in sweep_threads:
            name = f"{sweep_base}/threads:{threads}"
            if kind_run == kind and name not in values and f"{sdpa_base}/threads:{threads}" in values:
                values[name] = values[f"{sdpa_base}/threads:{threads}"]
    cases = classify(values.keys())
    peak_fma = {int(PEAK_FMA.match(n).group(1)): v.get("flops")
                for n, v in values.items() if PEAK_FMA.match(n)}
    peak_bw = {(PEAK_BW.match(n).group(1), int(PEAK_BW.match(n).group(2))):
               v.get("bytes_per_second") for n, v in values.items() if PEAK_BW.match(n)}
    peer_table, engines = (peers[0], peers[1]) if peers else ({}, [])

    groups = {}  # (group, case, threads) -> {gate: entry}
    shapes = {}  # (group, case, threads) -> bench_shapes.Shape
    ratios = {}  # (group, case, threads) -> {gate: paired gated / ungated ratio}
    order = []
    for name, entry in values.items():
        c = cases.get(name)
        if c is None or c.group in ("peak", "dtype", "typed", "paged", "varlen", "projection",
                                      "weights"):
            continue
        if c.group == "pair":
            if entry.get("ratio") is not None:
                ratios.setdefault(c.target + (c.threads,), {})[c.gate] = entry["ratio"]
            continue
        key = (c.group, c.case, c.threads)
        if key not in groups:
            groups[key] = {}
            shapes[key] = c.shape
            order.append(key)
        groups[key][c.gate] = entry
    group_rank = {"sdpa": 0, "sweep/prefill": 1, "sweep/decode": 2, "block": 3}
    named = [s.name for s in bench_shapes.load()[0]]

    def sort_key(key):
        group, case, threads = key
        case_rank = named.index(case) if case in named else int(case) if case.isdigit() else 0
        return (group_rank.get(group, 9), case_rank, threads)

    order.sort(key=sort_key)

    header = ["case", "thr", "ungated ms", "headwise ms", "elementwise ms", "hw ovh %",
              "ew ovh %", "GFLOP/s", "% FMA peak", "GB/s", "% read BW", "ISA"]
    for e in engines:
        header += [f"{e} ms", f"{e}+gate ms", f"x vs {e}"]
    rows, series, errors = [], [], []
    for key in order:
        group, case, threads = key
        gates = groups[key]
        ms = {g: gates[g].get("ms") if g in gates else None for g in GATES}
        for g, entry in gates.items():
            if entry.get("error"):
                errors.append(f"{group}/{g}/{case}/threads:{threads}: {entry['error']}")
        main = gates.get("elementwise") or gates.get("none") or next(iter(gates.values()))
        flops, bw = main.get("flops"), main.get("bytes_per_second")
        decode = shapes[key].decode
        fma = peak_fma.get(threads)
        if group == "sweep/decode":
            bw_peak = peak_bw.get((f"sweep_decode_{case}", threads))
        else:
            bw_peak = peak_bw.get((case, threads))
        label = {"sdpa": case, "block": f"block {case}"}.get(group, f"{group} {case}")

        paired = ratios.get(key, {})

        def overhead(g):  # the paired counter; else separate times, marked *
            if paired.get(g) is not None:
                return f"{100.0 * (paired[g] - 1.0):+.1f}"
            if ms[g] is None or ms["none"] is None:
                return "-"
            return f"{100.0 * (ms[g] / ms['none'] - 1.0):+.1f}*"

        row = [label, str(threads), fmt_ms(ms["none"]), fmt_ms(ms["headwise"]),
               fmt_ms(ms["elementwise"]), overhead("headwise"), overhead("elementwise"),
               f"{flops / 1e9:.1f}" if flops else "-",
               f"{100.0 * flops / fma:.0f}" if flops and fma else "-",
               f"{bw / 1e9:.1f}" if bw and decode else "-",
               f"{100.0 * bw / bw_peak:.0f}" if bw and bw_peak and decode else "-",
               main.get("label") or "-"]
        peer = peer_table.get((case, threads), {}) if group == "sdpa" else {}
        for e in engines:
            theirs = peer.get(e, {})
            gated = theirs.get("elementwise")
            row += [fmt_ms(theirs.get("none")), fmt_ms(gated),
                    f"{gated / ms['elementwise']:.2f}" if gated and ms["elementwise"] else "-"]
        rows.append((group, row))
        series.append({"group": group, "case": case, "threads": threads, "ms": ms,
                       "ratio": {g: paired.get(g) for g in GATES[1:]}})
    return header, rows, series, errors, peak_fma


def dtype_rows(data, peers):
    """The element-type table: per (case, threads, dtype), the paired speedup against f32 and the
    decode read share, with the path that ran; our ungated time and the peers' in the same type
    where tools/peers.py measured them. Also the speedups as (case, threads, dtype, value)."""
    values = medians(data["benchmarks"])
    table, order = {}, []
    for name, entry in values.items():
        m = DTYPE.match(name)
        if not m:
            continue
        key = (m.group(3), int(m.group(4)), m.group(2))
        if key not in table:
            table[key] = {}
            order.append(key)
        table[key][m.group(1)] = entry
    named = [s.name for s in bench_shapes.load()[0]]
    order.sort(key=lambda k: (named.index(k[0]) if k[0] in named else 99, k[2], k[1]))
    typed = peers[3] if peers else {}
    engines = sorted({e for entry in typed.values() for e in entry})
    header = ["case", "thr", "dtype", "speedup vs f32", "read share", "ISA"]
    if engines:
        header.append("ungated ms")
    for e in engines:
        header += [f"{e} ms", f"x vs {e}"]
    rows, speedups = [], []
    for key in order:
        speed = table[key].get("dtype_speedup", {})
        if speed.get("speedup"):
            speedups.append(key + (speed["speedup"],))
        share = table[key].get("decode_read_share", {})
        row = [key[0], str(key[1]), key[2],
               f"{speed['speedup']:.2f}" if speed.get("speedup") else "-",
               f"{share['share']:.2f}" if share.get("share") else "-",
               speed.get("label") or share.get("label") or "-"]
        if engines:
            ours = values.get(f"sdpa/none/{key[2]}/{key[0]}/threads:{key[1]}", {}).get("ms")
            row.append(fmt_ms(ours))
        for e in engines:
            theirs = typed.get(key, {}).get(e)
            row += [fmt_ms(theirs), f"{theirs / ours:.2f}" if theirs and ours else "-"]
        rows.append(("dtype", row))
    return header, rows, speedups


def paged_rows(data):
    """The paged K/V table: per (case, dtype, threads), paged_overhead's ratio per page size."""
    values = medians(data["benchmarks"])
    table, pages = {}, set()
    for name, entry in values.items():
        m = PAGED.match(name)
        if not m or not entry.get("ratio"):
            continue
        key = (m.group(2), m.group(1), int(m.group(4)))
        table.setdefault(key, {})[int(m.group(3))] = entry["ratio"]
        pages.add(int(m.group(3)))
    named = [s.name for s in bench_shapes.load()[0]]
    order = sorted(table, key=lambda k: (named.index(k[0]) if k[0] in named else 99, k[1], k[2]))
    pages = sorted(pages)
    header = ["case", "dtype", "thr"] + [f"page {p}" for p in pages]
    rows = [("paged", [k[0], k[1], str(k[2])]
             + [f"{table[k][p]:.3f}" if p in table[k] else "-" for p in pages]) for k in order]
    return header, rows


def projection_rows(data):
    """The projections table: per (case, threads), the block built with and without -march and
    the paired Eigen / default-backend counter of the -march build."""
    values = medians(data["benchmarks"])
    portable = medians(data.get("portable_benchmarks", []))
    named = [s.name for s in bench_shapes.load()[0]]
    keys = set()
    for name in list(values) + list(portable):
        m = PROJECTION.match(name) or (PORTABLE_BLOCK.match(name) if name in portable else None)
        if m:
            keys.add((m.groups()[-2], int(m.groups()[-1])))
    rows = []
    for case, threads in sorted(keys, key=lambda k: (named.index(k[0]) if k[0] in named else 99,
                                                     k[1])):
        block = f"block/elementwise/f32/{case}/threads:{threads}"
        native = values.get(block, {}).get("ms")
        plain = portable.get(block, {}).get("ms")
        paired = values.get(f"projection_backend_speedup/elementwise/f32/{case}/threads:{threads}",
                            {}).get("speedup")
        rows.append(("projection", [case, str(threads), fmt_ms(native) if native else "-",
                                    fmt_ms(plain) if plain else "-",
                                    f"{native / plain:.2f}*" if native and plain else "-",
                                    f"{paired:.3f}" if paired else "-"]))
    return ["case", "thr", "-march ms", "no -march ms", "speed no/with*", "eigen/backend"], rows


def weight_rows(data):
    """The bf16-weights table: per (case, threads), the paired f32 / bf16 weight counter and the
    bf16-weight block's label (the projections' route)."""
    values = medians(data["benchmarks"])
    named = [s.name for s in bench_shapes.load()[0]]
    keys = sorted(((m.group(3), m.group(2), int(m.group(4)), name)
                   for name, m in ((n, WEIGHTS.match(n)) for n in values) if m),
                  key=lambda k: (named.index(k[0]) if k[0] in named else 99, k[1], k[2]))
    rows = []
    for case, dtype, threads, name in keys:
        speedup = values[name].get("speedup")
        rows.append(("weights", [case, dtype, str(threads), f"{speedup:.3f}" if speedup else "-",
                                 values[name].get("label", "")]))
    return ["case", "weights", "thr", "f32w/bf16w", "path"], rows


def varlen_rows(data):
    """The packed-batch table: per (batch, dtype, threads), varlen_speedup and the packed call."""
    values = medians(data["benchmarks"])
    rows = []
    for name, entry in sorted(values.items()):
        m = VARLEN.match(name)
        if not m or not entry.get("varlen_speedup"):
            continue
        rows.append(("varlen", [m.group(2), m.group(1), m.group(3),
                                f"{entry['varlen_speedup']:.3f}",
                                f"{entry.get('packed_ms', 0.0):.2f}"]))
    return ["batch", "dtype", "thr", "varlen_speedup", "packed ms"], rows


def fmt_ms(x):
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def text_table(header, rows):
    widths = [max([len(header[i])] + [len(r[i]) for _, r in rows]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(header), "  ".join("-" * w for w in widths)]
    previous = None
    for group, row in rows:
        if previous is not None and group != previous:
            out.append("")
        out.append(line(row))
        previous = group
    return "\n".join(out)


def markdown_table(header, rows):
    align = ["---" if h in ("case", "shape", "ISA", "dtype") else "--:" for h in header]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for _, row in rows:
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


# ------------------------------------------------------------------------------------ machine


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line(context, report):
    parts = [f"{context.get('num_cpus', os.cpu_count())} CPUs"]
    if context.get("mhz_per_cpu"):
        parts.append(f"{context['mhz_per_cpu']} MHz")
    caches = []
    for c in context.get("caches", []):
        if c.get("type") in ("Data", "Unified"):
            size = c["size"]
            text = f"{size // (1 << 20)} MiB" if size >= 1 << 20 else f"{size // 1024} KiB"
            caches.append(f"L{c['level']}{'d' if c['type'] == 'Data' else ''} {text}")
    if caches:
        parts.append(", ".join(caches))
    load = report.get("load_before")
    if load is not None:
        parts.append(f"load average {load:.2f} before the run, {report.get('load_after', 0):.2f} "
                     "after")
    return f"{report.get('cpu_model', cpu_model())} ({'; '.join(parts)})"


def passes_text(passes):
    kinds = {"short": "timed for at least {t} s", "medium": "one iteration each",
             "long": "one iteration each", "paired": "pairs for at least {t} s",
             "varlen": "pairs for at least {t} s"}
    parts = []
    for p in passes:
        kind, _, portable = p["label"].partition("-")  # "<kind>-portable": the no -march binary
        how = kinds.get(kind, "").format(t=p["min_time"])
        what = "paired counters" if kind == "paired" else f"{kind} cases"
        what += " (no -march binary)" if portable else ""
        parts.append(f"{what}: {p['repetitions']} repetition"
                     f"{'s' if p['repetitions'] != 1 else ''}, {how}")
    return "; ".join(parts)


def describe(data, peers_context):
    r = data.get("report", {})
    passes = r.get("passes", [])
    reps = passes_text(passes)
    lines = [
        f"gated_attention benchmark report ({r.get('mode', '?')} mode), {r.get('date', '?')}",
        f"CPU: {machine_line(data.get('context', {}), r)}",
        f"Command: {r.get('command', '?')}",
        f"Benchmark wall time: {r.get('bench_wall_s', 0):.0f} s (inside timed loops: "
        f"{r.get('timed_s', 0):.0f} s); {reps}",
        "f32, causal (bottom-right aligned); ms = median over repetitions; ovh = the paired "
        "gate_overhead ratio (median of back-to-back gated / ungated calls) - 1, * where a row has "
        "no pair (separately timed rows); GFLOP/s, GB/s and % columns: the elementwise-gated run "
        "vs peak/fma_f32 and peak/read_bw with the same threads. Sweeps: Qwen3-Next heads "
        "(Hq 16, Hkv 2, D 256).",
    ]
    if peers_context:
        lines.append("Peers: " + ", ".join(f"{k} {v}" for k, v in peers_context.items()))
    return lines


# --------------------------------------------------------------------------------------- plot


def overhead_percent(s, gate):
    """(gated / ungated - 1 in %, mark) of a series row: the paired ratio (mark ''), else the
    separately timed rows' ratio (mark '*'), else (None, '')."""
    if s["ratio"].get(gate) is not None:
        return 100.0 * (s["ratio"][gate] - 1.0), ""
    if s["ms"][gate] and s["ms"]["none"]:
        return 100.0 * (s["ms"][gate] / s["ms"]["none"] - 1.0), "*"
    return None, ""


def plot(series, path, title, speedups=()):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (f"{sys.executable} has no matplotlib, so no PNG. Debian's python3-matplotlib "
                "(`bash tools/install_deps.sh --report` installs it) serves /usr/bin/python3; "
                f"then `/usr/bin/python3 tools/report.py --json-in "
                f"{os.path.join(os.path.dirname(path), JSON_NAME)}` draws this run.")
    colors = {"none": "#4d4d4d", "headwise": "#1f77b4", "elementwise": "#d62728"}
    names = {"none": "ungated", "headwise": "headwise gate", "elementwise": "elementwise gate"}
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = plt.figure(figsize=(13, 13 if speedups else 8.5))
    grid = fig.add_gridspec(3 if speedups else 2, 2)
    axes = [[fig.add_subplot(grid[r, c]) for c in range(2)] for r in range(2)]

    def plain_log_labels(ax):  # 1, 2, 5, 10, 20, ... rather than 10^n
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())

    def bars(ax, group, heading):
        rows = [s for s in series if s["group"] == group]
        threads = max((s["threads"] for s in rows), default=None)
        rows = [s for s in rows if s["threads"] == threads]
        if not rows:
            ax.set_axis_off()
            return False
        width = 0.27
        for i, g in enumerate(GATES):
            xs = [j + (i - 1) * width for j in range(len(rows))]
            ys = [s["ms"][g] or 0 for s in rows]
            ax.bar(xs, ys, width, color=colors[g], label=names[g])
        unpaired = False
        for j, s in enumerate(rows):
            over, mark = overhead_percent(s, "elementwise")
            if over is not None and s["ms"]["elementwise"]:
                unpaired |= bool(mark)
                ax.annotate(f"{over:+.1f}%{mark}", (j + width, s["ms"]["elementwise"]),
                            ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([s["case"] for s in rows], rotation=20, ha="right", fontsize=8)
        ax.set_yscale("log")
        plain_log_labels(ax)
        ax.set_ylabel("ms per call (log)")
        note = "; % elementwise gate, * separately timed" if unpaired else "; % elementwise gate"
        ax.set_title(f"{heading}, {threads} thread{'s' if threads != 1 else ''}{note}", fontsize=10)
        ax.legend(fontsize=8)
        return True

    def sweep(ax, group, heading, xlabel):
        rows = [s for s in series if s["group"] == group]
        threads = max((s["threads"] for s in rows), default=None)
        rows = sorted((s for s in rows if s["threads"] == threads), key=lambda s: int(s["case"]))
        if not rows:
            ax.set_axis_off()
            return
        xs = [int(s["case"]) for s in rows]
        for g in GATES:
            ax.plot(xs, [s["ms"][g] for s in rows], "o-", color=colors[g], label=names[g],
                    markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        plain_log_labels(ax)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x // 1024}K" if x >= 1024 else str(x) for x in xs], fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ms per call (log)")
        ax.set_title(f"{heading}, {threads} thread{'s' if threads != 1 else ''}", fontsize=10)
        twin = ax.twinx()
        for g in ("headwise", "elementwise"):
            over = [s["ratio"][g] for s in rows]
            over = [100.0 * (r - 1.0) if r is not None else float("nan") for r in over]
            twin.plot(xs, over, "--", color=colors[g], alpha=0.6, linewidth=1, marker=".")
        twin.axhline(0, color="#999999", linewidth=0.5)
        twin.set_ylabel("gate overhead %, paired (dashed)", fontsize=8)
        ax.legend(fontsize=8, loc="upper left")

    bars(axes[0][0], "sdpa", "SDPA, named shapes")
    if not bars(axes[0][1], "block", "Attention block, named shapes"):
        axes[0][1].set_axis_on()
        rows = [s for s in series if s["group"] == "sdpa"]
        labels = sorted({s["case"] for s in rows}, key=[s["case"] for s in rows].index)
        for t, marker in ((1, "o"), (2, "s")):
            for g in ("headwise", "elementwise"):
                pts = [(labels.index(s["case"]), 100.0 * (s["ratio"][g] - 1.0))
                       for s in rows if s["threads"] == t and s["ratio"][g] is not None]
                if pts:
                    axes[0][1].plot([p[0] for p in pts], [p[1] for p in pts], marker,
                                    color=colors[g], label=f"{names[g]}, {t} thr",
                                    fillstyle="full" if t == 1 else "none")
        axes[0][1].axhline(0, color="#999999", linewidth=0.5)
        axes[0][1].set_xticks(range(len(labels)))
        axes[0][1].set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        axes[0][1].set_ylabel("gated / ungated - 1 (%), paired")
        axes[0][1].set_title("SDPA gate overhead (gate_overhead pairs), named shapes", fontsize=10)
        axes[0][1].legend(fontsize=7)
    sweep(axes[1][0], "sweep/prefill", "Prefill sweep (Hq 16, Hkv 2, D 256)", "q_len = kv_len")
    sweep(axes[1][1], "sweep/decode", "Decode sweep (Hq 16, Hkv 2, D 256)", "kv_len (q_len 1)")
    if speedups:
        dtype_speedups(fig.add_subplot(grid[2, :]), speedups)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return None


def dtype_speedups(ax, speedups):
    """Bars of the paired dtype_speedup counters, per shape and element type, 1 and 2 threads."""
    cases = list(dict.fromkeys(k[0] for k in speedups))
    dtypes = list(dict.fromkeys(k[2] for k in speedups))
    threads = sorted({k[1] for k in speedups})
    slots = len(dtypes) * len(threads)
    width = 0.8 / slots
    cmap = __import__("matplotlib").colormaps["tab10"]
    for d_index, dtype in enumerate(dtypes):
        for t_index, t in enumerate(threads):
            slot = d_index * len(threads) + t_index
            pts = [(cases.index(c), v) for c, th, d, v in speedups if d == dtype and th == t]
            if not pts:
                continue
            ax.bar([x + (slot - (slots - 1) / 2) * width for x, _ in pts], [v for _, v in pts],
                   width, color=cmap(d_index), alpha=1.0 if t_index == len(threads) - 1 else 0.5,
                   label=f"{dtype}, {t} thr")
    ax.axhline(1.0, color="#999999", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, fontsize=8)
    ax.set_ylabel("f32 time / typed time, paired")
    ax.set_title("Element types: dtype_speedup (ungated; lighter bars 1 thread)", fontsize=10)
    ax.legend(fontsize=7, ncol=4)


# --------------------------------------------------------------------------------------- main


def replace_between(path, begin_marker, end_marker, section, required):
    """Replaces the text between the markers in ROOT/path; False where they are missing and not
    required."""
    full = os.path.join(ROOT, path)
    with open(full) as f:
        text = f.read()
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin < 0 or end < begin:
        if required:
            sys.exit(f"report: {path} has no {begin_marker} ... {end_marker} markers")
        return False
    text = text[:begin + len(begin_marker)] + "\n" + section + "\n" + text[end:]
    with open(full, "w") as f:
        f.write(text)
    return True


def update_docs(section, summary, png):
    """The generated section into docs/performance.md, the summary rows into README.md (where it
    has the summary markers) and the PNG to docs/performance.png."""
    replace_between(PERFORMANCE_MD, TABLE_BEGIN, TABLE_END, section, required=True)
    updated = [PERFORMANCE_MD]
    if replace_between("README.md", SUMMARY_BEGIN, SUMMARY_END, summary, required=False):
        updated.append("README.md (summary)")
    if png and os.path.exists(png):
        os.makedirs(os.path.join(ROOT, "docs"), exist_ok=True)
        shutil.copyfile(png, os.path.join(ROOT, README_PNG))
        updated.append(README_PNG)
    print(f"report: updated {', '.join(updated)}", file=sys.stderr)


def summary_markdown(header, rows, report, peers):
    """README's summary: the sdpa rows of the named shapes at the most threads run, with the
    elementwise gate's paired overhead and the share of the machine's own limit."""
    sdpa = [row for group, row in rows if group == "sdpa"]
    if not sdpa:
        return "(no sdpa rows in this run)"
    col = {h: i for i, h in enumerate(header)}
    threads = max(int(row[col["thr"]]) for row in sdpa)
    sdpa = [row for row in sdpa if int(row[col["thr"]]) == threads]
    # The gate's cost only where it was paired: separately timed cells would show the drift.
    paired = any(row[col["ew ovh %"]] not in ("-",) and not row[col["ew ovh %"]].endswith("*")
                 for row in sdpa)
    out_header = ["shape", "threads", "ungated ms", "gated ms"]
    out_header += ["gate cost %"] if paired else []
    out_header += ["% of limit"]
    engine = peers[1][0] if peers and peers[1] else None
    if engine:
        out_header.append(f"x vs {engine}")
    out_rows = []
    for row in sdpa:
        bw = row[col["% read BW"]]
        limit = f"{bw} read" if bw != "-" else f"{row[col['% FMA peak']]} FMA"
        cells = [row[col["case"]], row[col["thr"]], row[col["ungated ms"]],
                 row[col["elementwise ms"]]]
        cells += [row[col["ew ovh %"]]] if paired else []
        cells += [limit]
        if engine:
            cells.append(row[col[f"x vs {engine}"]])
        out_rows.append(("sdpa", cells))
    when = report.get("date", "?")
    commit = f" at {report['commit']}" if report.get("commit") else ""
    intro = (f"{report.get('cpu_model', '?')}, {when}{commit}, {report.get('mode', '?')} mode: "
             "SDPA with the elementwise gate, f32, causal. "
             + ("Gate cost: the paired `gate_overhead` ratio - 1. " if paired else "")
             + "% of limit: of `peak/fma_f32` (prefill) or `peak/read_bw` (decode) measured on "
             "the same machine with the same threads."
             + (f" x vs {engine}: its gated time / ours." if engine else ""))
    return textwrap.fill(intro, width=100) + "\n\n" + markdown_table(out_header, out_rows)


def git_commit():
    """The checkout's short commit hash (+ '-dirty' with local changes), or None."""
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               check=True, capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="every case, more repetitions")
    parser.add_argument("--bench", default=DEFAULT_BENCH, help="gated_attention_bench binary")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--filter", help="only benchmark names matching this regex (peaks kept)")
    parser.add_argument("--peers", action="append",
                        help="JSON written by tools/peers.py: extra columns (repeatable)")
    parser.add_argument("--json-in", help="render a finished run's JSON (this script's or a plain "
                        "Google Benchmark --benchmark_out JSON); runs no benchmark")
    parser.add_argument("--markdown", action="store_true",
                        help="print the Markdown section of docs/performance.md")
    parser.add_argument("--update-readme", action="store_true",
                        help=f"write the section into {PERFORMANCE_MD}, the PNG to {README_PNG} "
                        "and the summary rows into README.md (between its summary markers)")
    parser.add_argument("--portable-bench",
                        help="the same benchmark binary built without -march: its block rows "
                        "(elementwise gate, those the main binary runs) join the report")
    parser.add_argument("--note", help="one more line for the Markdown (e.g. 'machine shared')")
    parser.add_argument("--plan", action="store_true",
                        help="print the passes and their time forecast, run nothing")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, JSON_NAME)
    png_path = os.path.join(args.out, PNG_NAME)

    if args.json_in:
        with open(args.json_in) as f:
            data = json.load(f)
        data.setdefault("report", {})
        if os.path.abspath(args.json_in) != os.path.abspath(json_path):
            shutil.copyfile(args.json_in, json_path)
    else:
        if not os.access(args.bench, os.X_OK):
            sys.exit(f"report: no benchmark binary at {args.bench}; build it with "
                     "`bash tools/benchmark_report.sh` (or cmake --preset release && cmake --build "
                     "--preset release --target gated_attention_bench)")
        cases = classify(list_benchmarks(args.bench))
        if args.filter:
            keep = re.compile(args.filter)
            cases = {n: c for n, c in cases.items() if c.group == "peak" or keep.search(n)}
        passes = plan(cases, args.full)
        if args.plan:
            for label, reps, min_time, chosen in passes:
                print(f"{label}: {len(chosen)} benchmarks x {reps} repetitions (min_time "
                      f"{min_time}), forecast {forecast(reps, min_time, chosen):.0f} s")
                for c in chosen:
                    print(f"  {c.name}  ~{c.seconds:.3f} s/iteration")
            return 0
        load_before = os.getloadavg()[0]
        start = time.monotonic()
        data, pass_info = run_passes(args.bench, passes, args.out)
        if args.portable_bench:
            portable, portable_info = run_portable_pass(args.portable_bench, passes, args.out)
            data["portable_benchmarks"] = portable
            pass_info += portable_info
        command = os.environ.get("GATED_ATTENTION_REPORT_COMMAND") or " ".join(
            ["python3", "tools/report.py"] + sys.argv[1:])
        data["report"] = {
            "mode": "full" if args.full else "quick",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command,
            "commit": git_commit(),
            "cpu_model": cpu_model(),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "bench_wall_s": round(time.monotonic() - start, 1),
            "timed_s": round(sum(b.get("iterations", 0) * b["real_time"] * TO_MS[b["time_unit"]]
                                 for b in data["benchmarks"]
                                 if b.get("run_type") == "iteration") / 1e3, 1),
            "passes": pass_info,
        }
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)

    peers = load_peers(args.peers) if args.peers else None
    header, rows, series, errors, _ = build_rows(data, peers)
    intro = describe(data, peers[2] if peers else None)
    title = ", ".join(x for x in (data["report"].get("cpu_model"), data["report"].get("date"),
                                  data["report"].get("commit")) if x)
    dtype_header, dtype_table, speedups = dtype_rows(data, peers)
    plot_message = plot(series, png_path,
                        "gated vs ungated attention, f32" + (f": {title}" if title else ""),
                        speedups)

    table = text_table(header, rows)
    text = "\n".join(intro) + "\n\n" + table + "\n"
    r = data["report"]
    commit = f" at commit {r['commit']}" if r.get("commit") else ""
    md_lines = [
        f"Measured on {r.get('date', '?')}{commit} with `{r.get('command', '?')}` "
        f"({r.get('mode', '?')} mode, benchmarks {r.get('bench_wall_s', 0):.0f} s).",
        "",
        f"CPU: {machine_line(data.get('context', {}), r)}.",
    ]
    if args.note:
        md_lines += ["", args.note]
    md_lines += [
        "",
        "f32, causal (bottom-right aligned). `ms` is the median over repetitions"
        + (f" ({passes_text(r['passes'])})" if r.get("passes") else "")
        + ". `ovh` = the paired counter "
        "`gate_overhead/<gate>/f32/<shape>/threads:<n>` - 1 (its `ratio` is the median of "
        "back-to-back gated / ungated call times, in which the host's drift cancels); a value "
        "marked `*` has no pair (block rows) and is gated / ungated of the separately timed rows, "
        "which drift by 10-20% on shared hosts. GFLOP/s (useful FLOPs, "
        "4·B·Hq·D per visible pair), GB/s (K/V bytes, decode) and their % columns are the "
        "elementwise-gated run against `peak/fma_f32` and `peak/read_bw/<shape>` measured by the "
        "same binary with the same threads. Sweeps use Qwen3-Next's heads (Hq 16, Hkv 2, D 256)."
        + (" Peers (tools/peers.py, same shapes and threads, [b, heads, len, d] inputs, the gate "
           "as separate ops): " + ", ".join(f"{k} {v}" for k, v in peers[2].items())
           + "; `x vs <peer>` = their gated time / ours (elementwise)." if peers else ""),
        "",
        markdown_table(header, rows),
        "",
        f"![gated vs ungated attention]({os.path.basename(README_PNG)})",
    ]
    sections = [  # (text above the table, header, rows) of the paired-counter tables
        ("Element types: `speedup vs f32` is the paired counter "
         "`dtype_speedup/<dtype>/<shape>/threads:<n>` (median of back-to-back f32 / typed call "
         "times, ungated); `read share` is `decode_read_share`, the typed call's time against "
         "a plain read of the same K/V bytes. dtype `f32-kv<t>`: f32 activations, K/V in t; "
         "`bf16`, `f16`: every tensor in the type; `-storage`: DotPrecision::storage."
         + (" `<peer> ms`: the peer's ungated call with every tensor in the dtype; `x vs "
            "<peer>` = their time / ours (`ungated ms`)." if peers and peers[3] else ""),
         dtype_header, dtype_table),
        ("Paged K/V: the paired counter `paged_overhead/<dtype>/<shape>/page:<p>/threads:<n>` "
         "(median of back-to-back paged / contiguous call times, ungated; the pages of one "
         "sequence shuffled in their pool). Targets: <= 1.05 for pages of 16 or more, <= 1.25 "
         "for page 1.", *paged_rows(data)),
        ("Projections (issue 33): the block (elementwise gate, f32 weights) through the build's "
         "default projection backend, from the binary built with `-march=native` and from the one "
         "built without it (`release-portable`, what a consumer with CMake's defaults gets); "
         "`speed no/with*` = -march ms / no -march ms (separately timed rows, marked *); "
         "`eigen/backend` is the paired counter `projection_backend_speedup/...` of the -march "
         "build: the block with Eigen's `-march=native` products over the block with the default "
         "backend, back to back. Target: no -march at >= 0.95x the -march=native Eigen build.",
         *projection_rows(data)),
        ("bf16 weights (issue 33): the paired counter `weight_speedup/elementwise/bf16w/<shape>/"
         "threads:<n>` (median of back-to-back block call times with f32 weights / with the same "
         "weights rounded to bf16; f32 activations and cache). Targets: >= 1.6 on decode, >= 1.5 "
         "on prefill where the host has AVX512-BF16.", *weight_rows(data)),
        ("Packed varlen batches (llama8b's heads): the paired counter "
         "`sdpa_varlen/<dtype>/<batch>/threads:<n>` `varlen_speedup` (median of back-to-back "
         "one-call-per-entry / one packed call times); `mixed`: 4 entries decoding at 8K keys "
         "and a 512-query chunk of a 4K prompt, `many_small`: 64 entries decoding at 128 to 2K "
         "keys. Targets: >= 1.0 on mixed, >= 1.2 on many_small at 2 threads.", *varlen_rows(data)),
    ]
    for intro, section_header, section_rows in sections:
        if section_rows:
            md_lines += ["", intro, "", markdown_table(section_header, section_rows)]
            text += "\n" + text_table(section_header, section_rows) + "\n"
    md_lines += [
        "",
        "Rerun and regenerate this section: `bash tools/benchmark_report.sh`, then "
        f"`/usr/bin/python3 tools/report.py --json-in build/report/{JSON_NAME} --update-readme` "
        "(add `--peers build/report/peers.json` for the peer columns).",
    ]
    markdown = "\n".join(md_lines)
    with open(os.path.join(args.out, "report.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(markdown + "\n")

    print(markdown if args.markdown else text)
    for e in errors:
        print(f"report: error: {e}", file=sys.stderr)
    print(f"report: wrote {json_path}" + ("" if plot_message else f", {png_path}"),
          file=sys.stderr)
    if plot_message:
        print(f"report: {plot_message}", file=sys.stderr)
    if args.update_readme:
        update_docs(markdown, summary_markdown(header, rows, r, peers),
                    None if plot_message else png_path)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
