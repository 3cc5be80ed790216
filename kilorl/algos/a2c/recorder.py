"""What an A2C actor records per step: V(s) only (the log-prob is recomputed in the update)."""

from __future__ import annotations

from kilorl.algos.actor_critic import ValueRecorder


class A2CRecorder(ValueRecorder):
    def __init__(self) -> None:
        super().__init__(with_logp=False)
