"""Strategies: each ties the graph view, measurements and a planner into a plan for one paper."""
