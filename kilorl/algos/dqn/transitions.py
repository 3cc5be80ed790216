"""DQN's adder: the replay algorithms' n-step transitions (``kilorl.algos.common.transitions``)."""

from kilorl.algos.common.transitions import COLUMNS, WEIGHT, TransitionTable, nstep_transitions

__all__ = ["COLUMNS", "WEIGHT", "TransitionTable", "nstep_transitions"]
