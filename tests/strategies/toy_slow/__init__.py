"""A plug-in that would plan forever, reporting its progress every 10 ms (budget tests)."""

import time

from tvm_hetero.strategies.base import Strategy


class ToySlow(Strategy):
    """Never done: reports a step every 10 ms until the search stops it."""

    name = "toy_slow"
    help = "test plug-in: plans until stopped"
    plan_kind = "placement"

    def plan(self, model, devices, settings, progress):
        for k in range(10**6):
            time.sleep(0.01)
            progress.step(f"step {k}", k, None)
        raise AssertionError("never stopped")


STRATEGY = ToySlow()
