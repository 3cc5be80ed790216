"""The Nature DQN torso (Mnih et al. 2015): three convolutions over stacked 84x84 frames.

``uint8`` frames are scaled to [0, 1] inside the network, so env runners and the replay table
keep them as bytes. A ``[H, W]`` observation (single frames) counts as one channel.
"""

from __future__ import annotations

import torch
from torch import nn


class NatureCNN(nn.Module):
    """Conv 32x8x8/4, 64x4x4/2, 64x3x3/1, ReLU after each, flattened (``out_dim`` features)."""

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        if len(obs_shape) not in (2, 3):
            raise ValueError(f"model.torso: nature_cnn needs image observations [C, H, W] or [H, W], got {list(obs_shape)}")
        self.channels_added = len(obs_shape) == 2
        c, h, w = (1, *obs_shape) if self.channels_added else obs_shape
        if min(h, w) < 36:
            raise ValueError(f"model.torso: nature_cnn needs frames of at least 36x36, got {h}x{w}")
        self.convs = nn.Sequential(
            nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            self.out_dim = int(self.convs(torch.zeros(1, c, h, w)).shape[1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        if self.channels_added:
            x = x.unsqueeze(1)
        return self.convs(x)
