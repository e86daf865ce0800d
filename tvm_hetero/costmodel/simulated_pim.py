"""A simulated PIM device (Lee et al.'s Silent-PIM), fed from the paper's published speedups.

Nothing runs on it: its operator costs are the measured serial-CPU costs divided by the speedups
the paper publishes (Fig. 8) and its transfers cost what the same copy costs between two CPU
vdevices here (the PIM shares the CPU's DRAM). Every plan or table using it must say
"simulated".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tvm_hetero.plan.als import Costs
from tvm_hetero.plan.dcg import DCG, DAKey

SOURCE = "Lee et al., Fig. 8 (PIM speedup over CPU serial, sequence 8..64)"
PIM_SPEEDUP = {
    "matmul": ((8, 10.4), (64, 5.6)),
    "elementwise": ((8, 3.4), (64, 2.1)),
}
"""(sequence length, speedup over CPU serial) at both ends of the published range."""
MATMUL_OPS = frozenset({"relax.matmul"})


def pim_speedup(op: str, seq_len: int) -> float:
    """The published speedup of ``op`` at ``seq_len``, interpolated (clamped) over 8..64."""
    (p0, s0), (p1, s1) = PIM_SPEEDUP["matmul" if op in MATMUL_OPS else "elementwise"]
    return float(np.interp(seq_len, [p0, p1], [s0, s1]))


def with_simulated_pim(
    dcg: DCG, op_types: Mapping[str, str], measured: Costs, pim: int, serial: int, seq_len: int
) -> Costs:
    """``measured`` plus the costs of simulated device ``pim`` (a device index of ``dcg``).

    Parameters
    ----------
    dcg : DCG
        The DCG including the PIM device (its capability restricted to PIM operators).
    op_types : Mapping[str, str]
        Operator id -> op type (``relax.matmul``...).
    measured : Costs
        Real costs of the other devices (the PIM column, if any, is replaced).
    pim, serial : int
        Device indices of the simulated PIM and of the measured CPU serial device.
    seq_len : int
        Sequence length the speedups are read at.
    """
    node: dict[str, dict[int, float]] = {o: dict(per) for o, per in measured.node.items()}
    for o in dcg.ops:
        if pim in dcg.capable[o]:
            node[o][pim] = measured.node[o][serial] / pim_speedup(op_types[o], seq_len)
    edge = dict(measured.edge)
    for key in dcg.da_edges():
        if pim in (key.src, key.dst) and key not in edge:
            edge[key] = _cpu_copy_cost(measured.edge, key, pim, serial)
    return Costs(node, edge)


def _cpu_copy_cost(edges: Mapping[DAKey, float], key: DAKey, pim: int, serial: int) -> float:
    """The measured cost of the same copy with the PIM replaced by the serial CPU; else the
    median of copies of that size; else the measured per-element cost times the size."""
    src = serial if key.src == pim else key.src
    dst = serial if key.dst == pim else key.dst
    if src != dst and (same := edges.get(DAKey(src, dst, key.dtype, key.elements))) is not None:
        return same
    sized = [t for k, t in edges.items() if (k.dtype, k.elements) == (key.dtype, key.elements)]
    if sized:
        return float(np.median(sized))
    if not edges:
        return 0.0
    return float(np.median([t / max(1, k.elements) for k, t in edges.items()]) * key.elements)
