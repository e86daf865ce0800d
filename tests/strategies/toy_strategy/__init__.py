"""A strategy from outside the package, as a plug-in: every operator on the last device."""

from tvm_hetero.strategies.base import Candidate, PlanResult, Strategy


class Toy(Strategy):
    """Every operator on the last device, predicted as fast as ``--toy-predicted-ms`` says."""

    name = "toy"
    help = "test plug-in: every operator on the last device"
    plan_kind = "placement"

    def add_arguments(self, group):
        group.add_argument("--toy-predicted-ms", type=float, default=0.001)

    def plan(self, model, devices, settings, progress):
        from tvm_hetero.ir.opgraph import OpGraph
        from tvm_hetero.plan.placement import Placement

        ops = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
        names = tuple(d.name for d in devices)
        seconds = settings.toy_predicted_ms / 1e3
        plan = Placement(names, {op: len(names) - 1 for op in ops}, "toy", seconds)
        progress.say(f"toy: every operator on {names[-1]}")
        return PlanResult(plan, seconds, (Candidate("toy", seconds),))


STRATEGY = Toy()
