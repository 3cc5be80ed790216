"""Soft Actor-Critic (Haarnoja et al., 2018) with automatic entropy tuning, on the ``replay``
data path; with ``num_qs`` / ``num_min_qs``, ``critic_layer_norm`` and a high ``utd_ratio``
it is RLPD's critic recipe (Ball et al., 2023)."""
