"""The training loop's composable parts, each owning its config section and its state.

Learner-side loss terms: ``term`` (the protocol and the records a term sees),
``terms`` (the registry the learner builds its terms from) and one module per term.
"""
