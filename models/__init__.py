# harness.models: the explicit-state model checker over the real core reducers, and its scenarios.
