"""Kernel schedules: CPU rules in the style of dlight, tuned records, and which each kernel got."""

from tvm_hetero.schedules.apply import (
    KernelChoice,
    ScheduleSource,
    kernel_choices,
    schedule_kernels,
)
from tvm_hetero.schedules.cpu import cpu_rules

__all__ = ["KernelChoice", "ScheduleSource", "cpu_rules", "kernel_choices", "schedule_kernels"]
