"""The recipe report of an order, printed as the tables bench/README.md quotes: per family,
the cumulative error against random orders at each checkpoint and the per-batch verdict."""

from __future__ import annotations


def table(name: str, r: dict) -> None:
    for fam, d in r["families"].items():
        c, b = d["cumulative"], d["batches"]
        print(f"\n{name}, {fam}: below every random at every checkpoint: {c['below_all']}"
              f" (at most {c['max_ratio']:.3f}x the lowest random)")  # fmt: skip
        print("| records | order | random, lowest | random, mean |")
        print("|---:|---:|---:|---:|")
        for p, o, lo, mean in list(zip(r["position"], c["order"], c["random_min"],
                                       c["random_mean"], strict=True))[:-1]:  # fmt: skip
            print(f"| {p:,} | {o:,.1f} | {lo:,.1f} | {mean:,.1f} |")
        print(f"batches: order worst {b['order_worst']:.4f}, mean {b['order_mean']:.4f}; "
              f"random best {b['random_best']:.4f}, mean {b['random_mean']:.4f}; "
              f"worst beats best: {b['worst_beats_best']}")  # fmt: skip
