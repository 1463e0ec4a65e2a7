"""The steps of one experiment: proposing, training, fixing and judging it, and what its threads share."""
