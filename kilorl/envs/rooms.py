"""A sparse-reward navigation task: Sutton's four rooms, a random start and goal each episode.

The agent moves on a 13 x 13 grid (walls around and a cross of walls with four doorways);
actions are the four moves (``0`` north, ``1`` east, ``2`` south, ``3`` west; a move into a
wall leaves it where it is). The reward is 1 on reaching the goal (the episode terminates)
and 0 otherwise; ``max_steps`` moves without it truncate the episode. The observation is
``[row, col, goal row, goal col] / 12`` (float32). Nothing is downloaded.

Options for a two-level policy (``kilorl.envs.option_levels``): option ``d`` is "move in
direction ``d``". ``option_signal`` says, after each move, what the low level earns for it
(``option_bonus`` when the move went in the option's direction) and whether the environment
ends the option: the way ahead is a wall, or the changing coordinate reached a landmark
line (a doorway's row or column, or the goal's). The landmarks make the options usable for
getting through doorways; the reward stays sparse for both levels.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

LAYOUT = (
    "#############",
    "#     #     #",
    "#     #     #",
    "#           #",
    "#     #     #",
    "#     #     #",
    "## ####     #",
    "#     ### ###",
    "#     #     #",
    "#     #     #",
    "#           #",
    "#     #     #",
    "#############",
)
MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)], np.int64)
"""Row/column change of actions (and options) 0..3: north, east, south, west."""
DOORWAYS = ((3, 6), (10, 6), (6, 2), (7, 9))


class SparseRooms(gym.Env):
    """Four rooms; reward 1 only at a goal drawn anew (with the start) every episode."""

    metadata = {"render_modes": []}
    num_options = 4
    """Options offered to a high level: the four directions (``option_signal``)."""

    def __init__(self, max_steps: int = 100, option_bonus: float = 0.05) -> None:
        if max_steps < 1:
            raise ValueError(f"env.kwargs.max_steps must be at least 1, got {max_steps}")
        self.max_steps, self.option_bonus = int(max_steps), float(option_bonus)
        self.wall = np.array([[c == "#" for c in row] for row in LAYOUT])
        self.free = np.argwhere(~self.wall)
        self.scale = float(len(LAYOUT) - 1)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.pos = self.goal = self.last_move = np.zeros(2, np.int64)
        self.steps = 0
        self.lines_row = {r for r, _ in DOORWAYS}
        self.lines_col = {c for _, c in DOORWAYS}

    def _obs(self) -> np.ndarray:
        return (np.concatenate([self.pos, self.goal]) / self.scale).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        start, goal = self.np_random.choice(len(self.free), size=2, replace=False)
        self.pos, self.goal = self.free[start].copy(), self.free[goal].copy()
        self.steps = 0
        self.last_move = np.zeros(2, np.int64)
        return self._obs(), {}

    def _blocked(self, direction: int) -> bool:
        r, c = self.pos + MOVES[direction]
        return bool(self.wall[r, c])

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        if not 0 <= a < 4:
            raise ValueError(f"SparseRooms: action {a} is not one of the moves 0..3")
        before = self.pos.copy()
        if not self._blocked(a):
            self.pos = self.pos + MOVES[a]
        self.last_move = self.pos - before
        self.steps += 1
        reached = bool(np.array_equal(self.pos, self.goal))
        return self._obs(), float(reached), reached, self.steps >= self.max_steps and not reached, {}

    def option_signal(self, option: int) -> tuple[float, bool]:
        """After a move under ``option``: the low level's bonus (``option_bonus`` when the move
        went in the option's direction) and whether the option is over (a wall ahead, or the
        coordinate it changes reached a doorway's or the goal's line)."""
        moved = bool(np.array_equal(self.last_move, MOVES[option]))
        if option in (0, 2):
            landmark = int(self.pos[0]) in self.lines_row | {int(self.goal[0])}
        else:
            landmark = int(self.pos[1]) in self.lines_col | {int(self.goal[1])}
        return (self.option_bonus if moved else 0.0), self._blocked(option) or (moved and landmark)
