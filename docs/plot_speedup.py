"""
Draw docs/speedup_vs_k.png, the README's figure: measured speedup vs K beside Theorem 3.8 with the measured
alpha, c and v, for every CPU run saved by bench.py --json in notebooks/ (temperature 1.0, the shipped pair).

    python docs/plot_speedup.py          # reads notebooks/bench_cpu*.json, writes docs/speedup_vs_k.png

It only reads the committed JSON files: re-run bench.py with --json to add or refresh a machine.
"""

import json
import os

import matplotlib
matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = [  # (bench.py --json file, the label its machine gets in the figure)
    ("bench_cpu.json", "AMD EPYC, AVX-512"),
    ("bench_cpu_intel.json", "Intel Xeon, AVX-512 + AMX"),
]
SETTING = "t1.0"


def main():
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    for name, machine in RUNS:
        rows = json.load(open(os.path.join(HERE, "..", "notebooks", name)))["rows"]
        for decoder in dict.fromkeys(r["decoder"] for r in rows):
            mine = [r for r in rows if r["setting"] == SETTING and r["decoder"] == decoder]
            fixed = [r for r in mine if r["K"] != "auto"]
            color = next(colors)
            label = f"{machine}, {decoder}" + (" (bfloat16 target)" if decoder.endswith("bf16") else "")
            ax.plot([r["K"] for r in fixed], [r["speedup"] for r in fixed], "o-", color=color, label=label)
            ax.plot([r["K"] for r in fixed], [r["with_v"] for r in fixed], "--", color=color, alpha=0.7)
            for r in mine:
                if r["K"] == "auto":  # plotted at the median K it chose
                    ax.plot(r["k_median"], r["speedup"], "*", color=color, markersize=14, markeredgecolor="k")
    ax.plot([], [], "k--", alpha=0.7, label="Theorem 3.8 with the measured α, c, v")
    ax.plot([], [], "k*", markersize=12, linestyle="none", label='k="auto", at the median K it chose')
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xlabel("K, draft tokens per round")
    ax.set_ylabel("speedup over plain sampling")
    ax.set_title("the shipped pair, temperature 1.0, 2 CPU cores (bench.py)")
    ax.set_ylim(0.8, None)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "speedup_vs_k.png"), dpi=110)


if __name__ == "__main__":
    main()
