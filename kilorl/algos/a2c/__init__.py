"""Advantage actor-critic (Mnih et al., 2016), synchronous: the seam's second algorithm."""
