# harness.core: the pure, I/O-free heart of team.v1. Reducers over commands; time, ids and observations of the
# outside world arrive as command fields, so every transition is reproducible and model-checkable.
