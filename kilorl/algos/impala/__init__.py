"""IMPALA (Espeholt et al., 2018): an actor-critic trained on lagged rollouts, corrected with
V-trace, on the as-completed ``queue`` data path."""
