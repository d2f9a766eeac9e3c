"""SB3VecEnv: any Gymnasium vector env as a Stable-Baselines3 ``VecEnv`` (infos, autoreset, CNN images).

Needs stable-baselines3 (``pip install stable-baselines3``, or worldgym's ``dev`` extra); importing this module
without it raises an ``ImportError`` that says so. ``worldgym.wrappers.SB3VecEnv`` loads it on first use.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.wrappers.vector import NormalizeReward, RecordEpisodeStatistics

try:
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as error:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "worldgym.wrappers.sb3 needs stable-baselines3: `pip install stable-baselines3` "
        "(or install worldgym with the `dev` extra)"
    ) from error

__all__ = ["SB3VecEnv"]

_CONSUMED_INFO_KEYS = ("final_obs", "final_info")  # turned into SB3's own keys
# Vector wrappers that clear every env's running statistics on a partial reset (gymnasium 1.4: the inner env
# pops options["reset_mask"] before the wrapper reads it).
_PARTIAL_RESET_UNSAFE = (RecordEpisodeStatistics, NormalizeReward)


def _take(batch: Any, index: int) -> Any:
    """Entry ``index`` of a batched observation (array, object array, dict or tuple of those)."""
    if isinstance(batch, dict):
        return {key: _take(value, index) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_take(value, index) for value in batch)
    return batch[index]


def _where(mask: np.ndarray, new: Any, old: Any) -> Any:
    """Rows of ``new`` where ``mask`` is set, rows of ``old`` elsewhere (for dict and tuple batches too)."""
    if isinstance(new, dict):
        return {key: _where(mask, new[key], old[key]) for key in new}
    if isinstance(new, tuple):
        return tuple(_where(mask, n, o) for n, o in zip(new, old, strict=True))
    merged = np.array(old, copy=True)
    merged[mask] = np.asarray(new)[mask]
    return merged


def unbatch_info(info: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Gymnasium's vector info (arrays plus ``_key`` masks, nested dicts alike) as one dict per env.

    A key without a ``_key`` mask belongs to every env; numpy scalars become Python ones (as a single env's
    ``info`` usually has them). ``final_obs``/``final_info`` are left out (SB3VecEnv turns them into
    ``terminal_observation`` and the done step's info).

    >>> unbatch_info({"success": np.array([False, True]), "_success": np.array([False, True])}, 2)
    [{}, {'success': True}]
    >>> unbatch_info({"episode": {"r": np.array([1.0, 2.0]), "l": np.array([3, 4])},
    ...               "_episode": np.array([True, False])}, 2)
    [{'episode': {'r': 1.0, 'l': 3}}, {}]
    """
    per_env: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in info.items():
        if key.startswith("_") or key in _CONSUMED_INFO_KEYS:
            continue
        mask = info.get(f"_{key}", np.ones(num_envs, dtype=bool))
        values = unbatch_info(value, num_envs) if isinstance(value, dict) else value
        for index in np.flatnonzero(mask):
            value = values[index]
            per_env[index][key] = value.item() if isinstance(value, np.generic) else value
    return per_env


class _CnnImages:
    """Turns a uint8 Box of (H, W) or (H, W, C) into the (C, H, W) uint8 [0, 255] images of SB3's CnnPolicy."""

    def __init__(self, space: gym.Space) -> None:
        if not (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)):
            raise TypeError(
                f"cnn_images=True needs a uint8 Box observation of shape (H, W) or (H, W, C), got {space}"
            )
        low, high = self._channels_first(space.low), self._channels_first(space.high)
        if np.any(high <= low):
            raise ValueError(
                f"cnn_images=True needs high > low everywhere in the observation space, got {space}"
            )
        self.low, self.span = low.astype(np.int32), (high - low).astype(np.int32)
        self.identity = bool(np.all(low == 0) and np.all(high == 255))
        self.space = gym.spaces.Box(0, 255, low.shape, np.uint8)

    @staticmethod
    def _channels_first(image: np.ndarray) -> np.ndarray:
        """One image (H, W) or (H, W, C) as (C, H, W)."""
        return image[None] if image.ndim == 2 else np.moveaxis(image, -1, 0)

    def __call__(self, observations: np.ndarray, batched: bool) -> np.ndarray:
        """(N, ...) observations when ``batched``, else one observation, as channel-first [0, 255] images."""
        images = np.asarray(observations)
        if batched:
            images = images[:, None] if images.ndim == 3 else np.moveaxis(images, -1, 1)
        else:
            images = self._channels_first(images)
        if self.identity:
            return np.ascontiguousarray(images)
        return ((images.astype(np.int32) - self.low) * 255 // self.span).astype(np.uint8)


class SB3VecEnv(VecEnv):
    """A Gymnasium ``VectorEnv`` (gymnasium >= 1.0 API) as a Stable-Baselines3 ``VecEnv``.

    Args:
        env: The vector env, e.g. ``gym.make_vec("GameBoy-v0", num_envs=4)`` (natively batched) or a
            ``SyncVectorEnv``/``AsyncVectorEnv`` of single envs, possibly under vector wrappers.
        cnn_images: Present a uint8 Box observation of shape (H, W) or (H, W, C) as the channel-first
            (C, H, W) uint8 images in [0, 255] that SB3's ``CnnPolicy`` expects: a channel axis is added (or
            moved first) and values are stretched from the space's [low, high] (GameBoy's shades 0-3 become
            0, 85, 170, 255). ``terminal_observation`` is converted the same way.

    ## Episode ends
    SB3 expects a finished env to be reset within the step, its last observation in
    ``info["terminal_observation"]``. All three Gymnasium autoreset modes give that:

    * ``SAME_STEP`` (GameBoy-v0): ``info["final_obs"]`` becomes ``terminal_observation``. Where the env
      gives ``info["final_info"]`` (the done step's own info; ``SyncVectorEnv`` does), a done env's info is
      that plus the top-level entries it lacks (the reset's info and what vector wrappers added, such as
      ``episode``); the top-level entries also go to ``reset_infos``.
    * ``NEXT_STEP`` (Gymnasium's default) and ``DISABLED``: the finished envs are reset right away with
      ``reset(options={"reset_mask": done})``, so no step is spent on Gymnasium's reset step (which would
      ignore the action and give reward 0). Gymnasium 1.4's vector ``RecordEpisodeStatistics`` and
      ``NormalizeReward`` then clear the running envs' statistics too (a warning says so): with them, make
      the vector env with ``vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}``.

    Every info also gets ``"TimeLimit.truncated"`` (truncated and not terminated), as SB3's ``DummyVecEnv``
    does, and infos are SB3's list of per-env dicts (see :func:`unbatch_info`), so a vector
    ``RecordEpisodeStatistics``'s ``info["episode"]`` feeds SB3's episode logging.

    ## Seeds, options and sub-env access
    ``seed(s)`` makes the next ``reset`` pass ``seed=s`` (sub-env ``i`` of a ``SyncVectorEnv`` gets
    ``s + i``, as with SB3's own vec envs); ``set_options`` needs the same options for every env. For
    ``SyncVectorEnv`` (also wrapped), ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped`` reach each
    sub-env; an ``AsyncVectorEnv`` answers ``get_attr`` per env and ``set_attr``/``env_method`` for all envs
    at once. A natively batched env has no sub-envs: its own attribute or method stands for every index,
    ``set_attr``/``env_method`` act on all envs at once, and ``env_is_wrapped`` is True only for a vector
    wrapper class it is wrapped in.
    """

    def __init__(self, env: VectorEnv, cnn_images: bool = False) -> None:
        if not isinstance(env, VectorEnv):
            raise TypeError(f"SB3VecEnv needs a gymnasium.vector.VectorEnv, got {type(env).__name__}")
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        try:
            self.autoreset_mode = AutoresetMode(mode)
        except ValueError:
            raise ValueError(
                f"unknown autoreset_mode {mode!r} in the vector env's metadata; expected one of "
                f"{[m.value for m in AutoresetMode]}"
            ) from None
        self.env = env
        if self.autoreset_mode != AutoresetMode.SAME_STEP:
            self._warn_partial_resets()
        self._images = _CnnImages(env.single_observation_space) if cnn_images else None
        observation_space = self._images.space if self._images else env.single_observation_space
        self._actions: np.ndarray | None = None
        super().__init__(env.num_envs, observation_space, env.single_action_space)

    def _warn_partial_resets(self) -> None:
        """Warn about vector wrappers whose statistics a partial reset clears (see the class docstring)."""
        unsafe = [layer for layer in self._layers() if isinstance(layer, _PARTIAL_RESET_UNSAFE)]
        if unsafe:
            name = type(unsafe[0]).__name__
            warnings.warn(
                f"{name} on a {self.autoreset_mode.name} vector env: SB3VecEnv resets finished envs with "
                f"options['reset_mask'], which makes gymnasium's {name} clear every env's statistics; make the "
                "vector env with vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP} instead",
                stacklevel=3,
            )

    # ------------------------------------------------------------------------------------ stepping

    def _convert(self, observations: Any, batched: bool = True) -> Any:
        return self._images(observations, batched) if self._images else observations

    def _reset_arguments(self) -> tuple[int | list[int | None] | None, dict[str, Any] | None]:
        """The seed and options SB3 set for the next reset, in the form ``VectorEnv.reset`` takes."""
        seeds, options = self._seeds, self._options  # set_options made the options equal
        if all(seed is None for seed in seeds):
            seed = None
        elif None not in seeds and seeds == [seeds[0] + index for index in range(self.num_envs)]:
            seed = seeds[0]  # what VecEnv.seed() sets; a vector env spreads an int the same way
        else:
            seed = list(seeds)
        return seed, (dict(options[0]) if options[0] else None)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Options for the next reset; a Gymnasium vector env takes one dict, so per-env ones must be equal."""
        super().set_options(options)
        if any(option != self._options[0] for option in self._options):
            differing, self._options = self._options, [{} for _ in range(self.num_envs)]
            raise ValueError(
                "a Gymnasium vector env resets with one options dict for all envs; got differing per-env "
                f"options {differing}"
            )

    def reset(self) -> VecEnvObs:
        """Reset every env with the seed and options set by ``seed``/``set_options`` (used once)."""
        seed, options = self._reset_arguments()
        observations, info = self.env.reset(seed=seed, options=options)
        self.reset_infos = unbatch_info(info, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return self._convert(observations)

    def step_async(self, actions: np.ndarray) -> None:
        """Remember the actions; ``step_wait`` steps the vector env with them."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env, reset the finished ones, and return SB3's (obs, rewards, dones, infos)."""
        if self._actions is None:
            raise RuntimeError("step_wait() needs step_async(actions) first")
        actions, self._actions = self._actions, None
        observations, rewards, terminated, truncated, info = self.env.step(actions)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        dones = terminated | truncated
        infos = unbatch_info(info, self.num_envs)
        if dones.any():
            finals = observations
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                if "final_obs" not in info:
                    raise ValueError(
                        "a SAME_STEP vector env must put finished envs' last observations in info['final_obs']"
                    )
                finals = info["final_obs"]
                if "final_info" in info:  # the done step's own info; the top level has the reset's
                    for index, step_info in enumerate(unbatch_info(info["final_info"], self.num_envs)):
                        if dones[index]:
                            self.reset_infos[index] = infos[index]
                            infos[index] = {**infos[index], **step_info}
            for index in np.flatnonzero(dones):  # copies: a reset below may reuse the env's buffers
                terminal = copy.deepcopy(_take(finals, index))
                infos[index]["terminal_observation"] = self._convert(terminal, batched=False)
            if self.autoreset_mode != AutoresetMode.SAME_STEP:
                fresh, reset_info = self.env.reset(options={"reset_mask": dones.copy()})
                observations = _where(dones, fresh, observations)
                for index, reset_env_info in enumerate(unbatch_info(reset_info, self.num_envs)):
                    if dones[index]:
                        self.reset_infos[index] = reset_env_info
        for index, env_info in enumerate(infos):
            env_info["TimeLimit.truncated"] = bool(truncated[index] and not terminated[index])
        return self._convert(observations), np.asarray(rewards, dtype=np.float32), dones, infos

    def close(self) -> None:
        """Close the vector env."""
        self.env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One RGB frame per env from the vector env's ``render()`` (``render_mode="rgb_array"``)."""
        frames = self.env.render()
        return [None] * self.num_envs if frames is None else [frames[index] for index in range(self.num_envs)]

    # ------------------------------------------------------------------------------------ sub-envs

    def _sub_envs(self) -> VectorEnv | None:
        """The innermost vector env when it holds separate sub-envs (Sync/Async), else None (batched)."""
        inner = self.env.unwrapped
        return inner if hasattr(inner, "get_attr") and hasattr(inner, "call") else None

    def _layers(self) -> Iterator[VectorEnv]:
        """The vector env and every vector env it wraps, outermost first."""
        env = self.env
        yield env
        while isinstance(env, VectorWrapper):
            env = env.env
            yield env

    def _batched_attr(self, name: str) -> Any:
        """``name`` on the outermost layer that has it (a batched env's attribute, for all its envs)."""
        for layer in self._layers():
            if hasattr(layer, name):
                return getattr(layer, name)
        raise AttributeError(f"{type(self.env.unwrapped).__name__} has no attribute {name!r}")

    def _all_indices(self, indices: VecEnvIndices, what: str) -> None:
        """Raise unless ``indices`` covers every env (``what`` cannot act on some envs only)."""
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(
                f"{what} on {type(self.env.unwrapped).__name__} acts on all envs at once; pass indices=None "
                f"(got {indices!r})"
            )

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute of each env in ``indices`` (of the vector env itself when it is natively batched)."""
        indices = list(self._get_indices(indices))
        sub_envs = self._sub_envs()
        if isinstance(sub_envs, SyncVectorEnv):
            return [sub_envs.envs[index].get_wrapper_attr(attr_name) for index in indices]
        if sub_envs is None:
            return [self._batched_attr(attr_name)] * len(indices)
        values = sub_envs.get_attr(attr_name)
        return [values[index] for index in indices]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set the attribute on each env in ``indices`` (on the vector env itself when it is natively batched)."""
        sub_envs = self._sub_envs()
        if isinstance(sub_envs, SyncVectorEnv):
            for index in self._get_indices(indices):
                sub_envs.envs[index].set_wrapper_attr(attr_name, value)
            return
        self._all_indices(indices, "set_attr")
        if sub_envs is None:
            setattr(self.env.unwrapped, attr_name, value)
        else:
            sub_envs.set_attr(attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call the method on each env in ``indices`` (once on the vector env when it is natively batched)."""
        sub_envs = self._sub_envs()
        if isinstance(sub_envs, SyncVectorEnv):
            return [
                sub_envs.envs[index].get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                for index in self._get_indices(indices)
            ]
        self._all_indices(indices, "env_method")
        if sub_envs is not None:
            return list(sub_envs.call(method_name, *method_args, **method_kwargs))
        return [self._batched_attr(method_name)(*method_args, **method_kwargs)] * self.num_envs

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each env in ``indices`` is wrapped in ``wrapper_class`` (see the class docstring)."""
        indices = list(self._get_indices(indices))
        sub_envs = self._sub_envs()
        if isinstance(sub_envs, SyncVectorEnv):
            return [is_wrapped(sub_envs.envs[index], wrapper_class) for index in indices]
        if sub_envs is not None:
            raise NotImplementedError(
                f"env_is_wrapped cannot look into {type(sub_envs).__name__}'s worker processes; use a "
                "SyncVectorEnv, or wrap SB3VecEnv in SB3's VecMonitor for evaluate_policy"
            )
        wrapped = any(
            isinstance(layer, VectorWrapper) and isinstance(layer, wrapper_class) for layer in self._layers()
        )
        return [wrapped] * len(indices)
