"""A sparse-reward navigation task: a grid of rooms, a random start and goal each episode.

The agent moves on a ``rooms x rooms`` grid of square rooms of ``room_size`` cells a side
(3 x 3 rooms of 5: 19 x 19 cells with the walls), one doorway in each wall between two rooms
(``room_layout``); actions are the four moves (``0`` north, ``1`` east, ``2`` south, ``3``
west; a move into a wall leaves it where it is). The reward is 1 on reaching the goal (the
episode terminates) and 0 otherwise; ``max_steps`` moves without it truncate the episode. The
observation is the agent's and the goal's row and column, divided by the grid's last index
(float32). Nothing is downloaded.

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

MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)], np.int64)
"""Row/column change of actions (and options) 0..3: north, east, south, west."""


def room_layout(rooms: int, room_size: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``(wall, doorways)``: a ``rooms x rooms`` grid of square rooms of ``room_size`` cells a
    side, walled around, with one doorway in each wall between two rooms at a fixed place
    (``(i + 2 j) mod room_size`` along it, so the doorways do not line up)."""
    step = room_size + 1
    size = rooms * step + 1
    wall = np.zeros((size, size), bool)
    wall[::step, :] = wall[:, ::step] = True
    doorways = []
    for i in range(rooms):
        for j in range(rooms - 1):
            doorways.append((i * step + 1 + (i + 2 * j) % room_size, (j + 1) * step))  # east wall of room (i, j)
            doorways.append(((j + 1) * step, i * step + 1 + (2 * i + j + 1) % room_size))  # south wall of (j, i)
    for r, c in doorways:
        wall[r, c] = False
    return wall, doorways


class SparseRooms(gym.Env):
    """A grid of rooms; reward 1 only at a goal drawn anew (with the start) every episode."""

    metadata = {"render_modes": []}
    num_options = 4
    """Options offered to a high level: the four directions (``option_signal``)."""

    def __init__(self, rooms: int = 3, room_size: int = 5, max_steps: int = 200, option_bonus: float = 0.05) -> None:
        for name, value, least in (("rooms", rooms, 1), ("room_size", room_size, 2), ("max_steps", max_steps, 1)):
            if value < least:
                raise ValueError(f"env.kwargs.{name} must be at least {least}, got {value}")
        self.max_steps, self.option_bonus = int(max_steps), float(option_bonus)
        self.wall, self.doorways = room_layout(rooms, room_size)
        self.step_size = room_size + 1
        self.free = np.argwhere(~self.wall)
        self.scale = float(len(self.wall) - 1)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.pos = self.goal = self.last_move = np.zeros(2, np.int64)
        self.steps = 0

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
        axis = 0 if option in (0, 2) else 1  # the coordinate the option changes
        return (self.option_bonus if moved else 0.0), self._blocked(option) or (moved and self._landmark(axis))

    def _landmark(self, axis: int) -> bool:
        """Whether the agent's ``axis`` coordinate lines it up with the goal, or with a doorway
        in a wall of its room that the other axis crosses."""
        here = int(self.pos[axis])
        if here == int(self.goal[axis]):
            return True
        top_left = (self.pos // self.step_size) * self.step_size
        return any(d[axis] == here and top_left[1 - axis] <= d[1 - axis] <= top_left[1 - axis] + self.step_size
                   for d in self.doorways)
