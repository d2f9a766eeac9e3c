"""worldgym: environment-first RL. Importing the package registers every env id with Gymnasium.

>>> import gymnasium as gym
>>> import worldgym
>>> env = gym.make("CSRPhone-v1")
"""

from worldgym.registration import register_envs

__version__ = "0.2.0.dev0"

register_envs()

__all__ = ["__version__", "register_envs"]
