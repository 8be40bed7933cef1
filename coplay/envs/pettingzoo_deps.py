"""PettingZoo and Gymnasium, imported in one place so that both adapters fail alike
when the optional extra is missing: with the command that installs it."""

try:
    import gymnasium
    from gymnasium.spaces import Box, Dict, Discrete
    from pettingzoo import AECEnv
except ImportError as err:
    raise ImportError(
        "the PettingZoo adapters need the optional dependency pettingzoo: "
        "pip install 'coplay[pettingzoo]'"
    ) from err

__all__ = ["AECEnv", "Box", "Dict", "Discrete", "gymnasium"]
