"""DQN's adder: the replay algorithms' n-step transitions (``kilorl.algos.common.transitions``)."""

from kilorl.algos.common.transitions import COLUMNS, TransitionTable, nstep_transitions

__all__ = ["COLUMNS", "TransitionTable", "nstep_transitions"]
