"""``FSDPLearner``: the data-parallel GRPO learner with FSDP2 (``torch.distributed.fsdp.fully_shard``): every
rank holds ``1/world_size`` of the policy's weights and of its optimizer state.

**Sharding.** Each decoder layer is a ``fully_shard`` unit, and the root unit is the learner's
:class:`~worldgym.distributed.data_parallel.LossModule` (the loss's forward: ``score_tokens`` calls the decoder
and LM head directly, so the policy's own forward never runs in training). The root holds what is
left (embeddings, tied LM head, final norm). ``fully_shard`` shards *every* parameter of a unit, frozen ones
included: under LoRA each rank keeps ``1/world_size`` of the frozen base too, and a unit may mix frozen base
weights with trainable adapters. Only the trainable tensors get gradients; they are reduce-scattered
(averaged) in the backward pass, and the optimizer steps this rank's shards of them (rebuilt on the sharded
parameters by the trainer's ``rebuild_optimizer``: its ``trainable`` dict then holds DTensors). A full fine-tuning run's frozen KL
reference is a whole, unsharded copy on every rank.

**Update.** The same as :class:`~worldgym.distributed.DDPLearner`'s: rank ``r`` scores its rows of each
minibatch, every term weighted by its share of the whole minibatch's normaliser
(:mod:`worldgym.agents.grpo.step`), the auxiliary loss by its share of the phone calls. Every
forward all-gathers the layers it runs, so the ranks must run as many: an auxiliary loss's shares are padded
to equal sizes with repeated examples weighted 0 (``LossShard.equal_shares``), and with ``microbatch_size`` every
rank runs as many microbatches as the largest share needs (the others padded with one-row repeats weighted
0). Each microbatch's backward reduce-scatters its gradients, so a rank keeps sharded gradients only: the
auxiliary-gradient cap and projection sum each rank's part of their norms and dot products over the ranks
(:meth:`FSDPLearner.sum_gradient_parts`).

**Generation.** Rank 0 generates alone (rollouts, validation). Around it, every rank enters
:meth:`FSDPLearner.full_weights`: each unit is unsharded (an all-gather every rank joins) and kept whole
through forwards (``set_reshard_after_forward(False)``), so rank 0's forwards gather nothing; the others wait
at the next collective. Afterwards every unit is resharded. Backward prefetching follows an explicit layer
order, not the order FSDP2 records from forwards (rank 0's generation forwards would make the ranks' orders
differ and their all-gathers mismatch). ``HFEngine`` passes ``synced_gpus=False`` to ``generate``
(transformers would otherwise make every rank of an FSDP model step generation together).

**Weights out and in.** Ray rollout workers get the gathered whole trainable tensors (:meth:`full_trainable`).
Checkpoints keep the project's format: every rank gathers the full trainable state and optimizer state
(``get_model_state_dict`` / ``get_optimizer_state_dict`` with ``full_state_dict=True, cpu_offload=True``),
rank 0 writes it; loading reads the file on every rank and shards it back (``set_model_state_dict`` /
``set_optimizer_state_dict``), so a checkpoint moves between one process, DDP and FSDP.

Gloo on CPU is tested (2 ranks); the test suite does not cover NCCL on CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from peft import PeftModel
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from worldgym.distributed.data_parallel import DataParallelLearner, LossModule, Trainer, all_reduce_sum

__all__ = ["FSDPLearner"]

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)


class FSDPLearner(DataParallelLearner):
    """Sharded data-parallel updates for a :class:`~worldgym.agents.grpo.GRPOTrainer` (LoRA adapters or full
    fine-tuning), with or without an auxiliary loss. Shards the trainer's policy in place and rebuilds its optimizer on the shards.

    Args:
        trainer: this rank's trainer, built identically on every rank.
        process_group: default: the global group.

    Raises:
        RuntimeError: no process group is initialised.
    """

    collective_forwards = True  # a forward all-gathers each layer it runs

    def __init__(self, trainer: Trainer, process_group: dist.ProcessGroup | None = None):
        super().__init__(trainer, process_group)
        self.layers = _decoder_layers(trainer.policy)
        root = LossModule(trainer.policy)
        self._broadcast_from_rank0(root)
        self._model = _shard(root, self.layers, self._mesh())
        trainer.rebuild_optimizer()  # over the sharded parameters

    @property
    def model(self) -> LossModule:
        """The sharded loss module (FSDP2's root unit)."""
        return self._model

    def sum_gradient_parts(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the ranks: each rank's are over its shards of the gradients."""
        return all_reduce_sum(values, self.group)

    def _broadcast_from_rank0(self, module: torch.nn.Module) -> None:
        """Rank 0's weights on every rank (each shards its own copy: a warm start trained on each rank may
        differ by float rounding)."""
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, group=self.group, group_src=0)

    def _mesh(self) -> DeviceMesh:
        device_type = torch.device(self.trainer.config.device).type
        if self.group is None:
            return init_device_mesh(device_type, (self.world_size,))
        return DeviceMesh.from_group(self.group, device_type)

    @contextmanager
    def full_weights(self) -> Iterator[None]:
        """Every unit unsharded and kept whole through forwards, so rank 0 can generate alone; every rank
        enters (the unshard is collective)."""
        units = self._units()
        for unit in units:
            unit.unshard()
        for layer in self.layers:
            layer.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for layer in self.layers:
                layer.set_reshard_after_forward(True, recurse=False)
            for unit in units:
                unit.reshard()

    def full_trainable(self) -> Mapping[str, torch.Tensor]:
        """The whole trainable tensors (gathered: every rank calls it; only rank 0's are filled)."""
        whole = get_model_state_dict(self.trainer.policy, options=_FULL)
        # ignore_frozen_params keeps a tied copy of a frozen tensor (the LM head tied to the embeddings)
        return {name: tensor for name, tensor in whole.items() if name in self.trainer.trainable}

    def full_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The whole trainable tensors and optimizer state (``optimizer.state_dict()``'s layout), gathered to
        rank 0 (every rank calls it; the others get empty ones)."""
        weights = dict(self.full_trainable())
        by_name = get_optimizer_state_dict(self.trainer.policy, self.trainer.optimizer, options=_FULL)
        return weights, (_by_index(by_name, self._names()) if self.rank == 0 else {})

    def load_full_state(self, weights: Mapping[str, torch.Tensor], optimizer_state: dict[str, Any] | None
                        ) -> None:
        """Shard whole trainable tensors (and an ``optimizer.state_dict()``) back onto this rank."""
        policy = self.trainer.policy
        set_model_state_dict(policy, dict(weights),
                             options=StateDictOptions(full_state_dict=True, strict=False))
        if optimizer_state is not None:
            set_optimizer_state_dict(policy, self.trainer.optimizer, _by_name(optimizer_state, self._names()),
                                     options=StateDictOptions(full_state_dict=True))

    def _units(self) -> list[FSDPModule]:
        return [module for module in self._model.modules() if isinstance(module, FSDPModule)]

    def _names(self) -> list[str]:
        """The trainable tensors' names in the optimizer's order (``state_dict()``'s parameter indices)."""
        names = {id(p): name for name, p in self.trainer.trainable.items()}
        return [names[id(p)] for group in self.trainer.optimizer.param_groups for p in group["params"]]


def _decoder_layers(policy: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a transformers causal LM (PEFT-wrapped or not)."""
    base = policy.get_base_model() if isinstance(policy, PeftModel) else policy
    return list(base.get_decoder().layers)


def _shard(root: LossModule, layers: list[torch.nn.Module], mesh: DeviceMesh) -> LossModule:
    """``fully_shard`` each layer, then the root; backward prefetches the previous layer (an explicit order:
    the recorded one differs between ranks once rank 0 has generated alone); the root is initialised as
    FSDP2's root now, before rank 0's first generation runs the layers outside it."""
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(root, mesh=mesh)
    root.set_modules_to_backward_prefetch([layers[-1]])
    for index, layer in enumerate(layers):
        layer.set_modules_to_backward_prefetch([layers[index - 1] if index else root])
    root._get_fsdp_state()._lazy_init()  # FSDP2 picks its root at the first forward; no public call does it
    return root


def _by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A name-keyed optimizer state dict (``get_optimizer_state_dict``'s) keyed by parameter index, as
    ``optimizer.state_dict()`` is."""
    index = {name: i for i, name in enumerate(names)}
    groups = [{**group, "params": [index[name] for name in group["params"]]}
              for group in state["param_groups"]]
    return {"state": {index[name]: values for name, values in state["state"].items()}, "param_groups": groups}


def _by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """:func:`_by_index` inverted."""
    groups = [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]]
    return {"state": {names[int(i)]: values for i, values in state["state"].items()}, "param_groups": groups}
