"""What a PPO actor records per step: V(s) and the log-prob of the action taken."""

from __future__ import annotations

from kilorl.algos.actor_critic import ValueRecorder


class PPORecorder(ValueRecorder):
    """PPO's ratio needs the behaviour policy's log-prob; GAE and value clipping need V(s)."""

    def __init__(self) -> None:
        super().__init__(with_logp=True)
