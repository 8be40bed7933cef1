"""Training: the one loop, its composable parts, the learners and the run configs that build them."""
