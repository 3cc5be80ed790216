"""Learner building blocks every algorithm composes: the device, named modules and their
optimizers with checkpoints, the optimizer step, and target-network updates."""
