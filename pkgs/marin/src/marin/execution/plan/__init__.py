"""The plan: an immutable value saying, for every step of a graph, what a run will do and why."""
