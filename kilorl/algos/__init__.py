"""Algorithms: losses and update rules over batches. No Ray, no environments."""
