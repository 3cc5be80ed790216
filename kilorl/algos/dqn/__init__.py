"""Deep Q-Networks (Mnih et al., 2015) with double Q-learning (van Hasselt et al., 2016),
n-step returns, a dueling head (Wang et al., 2016) and Ape-X's per-actor epsilon (Horgan
et al., 2018), on the ``replay`` data path."""
