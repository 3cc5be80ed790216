"""Proximal Policy Optimization (Schulman et al., 2017)."""
