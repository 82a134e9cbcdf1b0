#!/usr/bin/env python3
"""Draws docs/attention_sinks.png from the JSON that examples/attention_sink_report writes:
the first-token attention share per layer for each model, the largest hidden state entering each
layer, the distribution of the gated model's gate scores (per token and head, the mean over the
head's dims, as the kernels report it), and the training and validation loss curves.

    build/dev/examples/attention_sink_report --json /tmp/sinks.json
    /usr/bin/python3 tools/plot_attention_sinks.py /tmp/sinks.json    # Debian's python3-matplotlib
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"none": "tab:red", "elementwise": "tab:blue", "headwise": "tab:green"}


def smooth(values, window=50):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs",
                                                  "attention_sinks.png"))
    args = ap.parse_args()
    with open(args.json) as f:
        report = json.load(f)
    models = report["models"]
    fig, (share, hidden, gates, loss) = plt.subplots(1, 4, figsize=(19, 4.2))

    layers = range(len(models[0]["layers"]))
    width = 0.8 / len(models)
    for i, m in enumerate(models):
        share.bar([l + (i - (len(models) - 1) / 2) * width for l in layers],
                  [100 * l["sink_share"] for l in m["layers"]], width,
                  label=f"{m['gate']} gate", color=COLOURS.get(m["gate"]))
    share.axhline(100 * report["uniform_sink_share"], color="grey", linestyle=":",
                  label="uniform attention")
    share.set_xticks(list(layers))
    share.set_xlabel("layer")
    share.set_ylabel("attention on the first token (%)")
    share.set_title("First-token share (held-out text)")
    share.legend()

    for m in models:
        hidden.plot(list(layers), [l["max_abs_hidden"] for l in m["layers"]], marker="o",
                    label=f"{m['gate']} gate", color=COLOURS.get(m["gate"]))
    hidden.set_xticks(list(layers))
    hidden.set_xlabel("layer")
    hidden.set_ylabel("max |hidden state| entering the layer")
    hidden.set_title("Largest activation (held-out text)")
    hidden.legend()

    for m in models:
        if m["gate"] == "none":
            continue
        bins = len(m["layers"][0]["gate_histogram"])
        counts = [sum(l["gate_histogram"][b] for l in m["layers"]) for b in range(bins)]
        total = sum(counts) or 1
        gates.bar([(b + 0.5) / bins for b in range(bins)], [c / total for c in counts], 1 / bins,
                  alpha=0.6, label=f"{m['gate']} gate", color=COLOURS.get(m["gate"]))
    gates.set_xlabel("gate score (mean over a head's dims)")
    gates.set_ylabel("fraction of (token, head)")
    gates.set_title("Gate scores, all layers")
    gates.legend()

    for m in models:
        c = COLOURS.get(m["gate"])
        loss.plot(smooth(m["train_loss"]), color=c, alpha=0.5, label=f"{m['gate']}: train")
        loss.plot(m["val_step"], m["val_loss"], color=c, marker="o", markersize=3,
                  label=f"{m['gate']}: validation")
    loss.set_ylim(top=min(3.0, loss.get_ylim()[1]))
    loss.set_xlabel("step")
    loss.set_ylabel("loss (nats per byte)")
    loss.set_title("Training")
    loss.legend()

    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
