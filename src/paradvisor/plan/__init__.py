"""The planner: the strategy space, per-candidate estimates, heterogeneous allocation, ranking."""
