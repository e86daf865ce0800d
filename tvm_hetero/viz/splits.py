"""Plots of a split plan: each key operator's ratio bar and the two devices' timeline."""

from __future__ import annotations

from pathlib import Path

from tvm_hetero.plan.eop import SplitPlan

COLORS = ("tab:blue", "tab:orange", "tab:gray")


def plot_split_plan(plan: SplitPlan, title: str, path: Path) -> Path:
    """Left: ``(alpha, beta)`` per key operator as stacked bars; right: a timeline with one row
    per device and one for copies, operators one after another (predicted times).

    Parameters
    ----------
    plan : SplitPlan
        The plan (its predicted shard and copy times are drawn).
    title : str
        Figure title.
    path : Path
        Output PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = plan.splits
    height = max(3.0, 0.28 * len(splits) + 1.5)
    fig, (bars, line) = plt.subplots(
        1, 2, figsize=(14, height), gridspec_kw={"width_ratios": [1, 2]}
    )
    names = [f"{s.node_id} ({s.dim})" for s in splits]
    bars.tick_params(axis="y", labelsize=7 if len(splits) > 30 else 9)
    alphas = [s.ratios[0] for s in splits]
    betas = [s.ratios[1] for s in splits]
    bars.barh(names, alphas, color=COLORS[0], label=plan.devices[0])
    bars.barh(names, betas, left=alphas, color=COLORS[1], label=plan.devices[-1])
    bars.set_xlim(0, 1)
    bars.invert_yaxis()
    bars.set_xlabel("share of the partition dimension")
    bars.legend(loc="lower right", fontsize=8)
    t = 0.0
    rows = [plan.devices[0], plan.devices[-1], "copies"]
    bar = {"height": 0.5, "edgecolor": "white", "linewidth": 0.4}
    for s in splits:
        line.barh(2, s.comm_s * 1e3, left=t * 1e3, color=COLORS[2], **bar)
        start = t + s.comm_s / 2
        for row in (0, 1):
            if s.times_s[row]:
                line.barh(row, s.times_s[row] * 1e3, left=start * 1e3, color=COLORS[row], **bar)
        t += s.total_s
    line.barh(0, plan.rest_s * 1e3, left=t * 1e3, color=COLORS[0], alpha=0.4, hatch="//", **bar)
    line.set_yticks(range(3), rows)
    line.set_ylim(2.8, -0.8)
    line.set_xlabel("predicted ms (key operators in order, then the rest on the home device)")
    fig.suptitle(f"{title}: {plan.strategy}, predicted {plan.predicted_s * 1e3:.3f} ms")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
