"""Generate the Dreamer v3 golden fixtures from a pip-installed sheeprl 0.8.4 (run by hand, in its own venv).

    python3 -m venv runs/sheeprl-venv
    runs/sheeprl-venv/bin/pip install torch==2.13.0 sheeprl==0.8.4
    runs/sheeprl-venv/bin/python tools/make_dreamer_fixtures.py [--out tests/fixtures/dreamer_v3]

Writes tiny files checked by ``tests/agents/dreamer_v3``: symlog / two-hot log_prob and mean, an RSSM scan
with ``is_first`` resets (weights as safetensors, recorded posterior samples), world-model loss parts with
free bits,
lambda-returns, percentile return normalisation, and ``Ratio`` / ``off_policy_schedule`` step sequences.
Production code never imports sheeprl; only this script does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from safetensors.torch import save_file
from sheeprl.algos.dreamer_v3.agent import RSSM, RecurrentModel, RepresentationModel
from sheeprl.algos.dreamer_v3.loss import reconstruction_loss
from sheeprl.algos.dreamer_v3.utils import Moments, compute_lambda_values
from sheeprl.models.models import MLP, LayerNorm
from sheeprl.utils.distribution import BernoulliSafeMode, SymlogDistribution, TwoHotEncodingDistribution
from sheeprl.utils.utils import Ratio, off_policy_schedule, symlog
from torch import nn
from torch.distributions import Independent

SEED = 1234


def to_np(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in tensors.items()}


def two_hot_fixture(out: Path, gen: torch.Generator) -> None:
    """symlog, two-hot log_prob and mean over 255 bins, incl. exact-bin and out-of-range values."""
    values = torch.cat(
        [
            torch.randn(20, generator=gen) * 30,
            torch.tensor([0.0, 1.0, -1.0, 1e-6, 3e9, -3e9, float(torch.expm1(torch.tensor(40 / 254)))]),
        ]
    ).unsqueeze(-1)
    logits = torch.randn(values.shape[0], 255, generator=gen) * 2
    dist = TwoHotEncodingDistribution(logits, dims=1)
    np.savez(
        out / "two_hot.npz",
        **to_np(
            {
                "values": values,
                "logits": logits,
                "symlog": symlog(values),
                "log_prob": dist.log_prob(values),
                "mean": dist.mean,
            }
        ),
    )


def rssm_fixture(out: Path, gen: torch.Generator) -> None:
    """An RSSM scan on tiny dims with is_first resets at t=0 and mid-sequence; posterior samples recorded."""
    dims = {"T": 6, "B": 3, "H": 8, "U": 8, "S": 3, "D": 4, "A": 2, "E": 5}
    H, U, S, D, A, E = (dims[k] for k in "HUSDAE")
    torch.manual_seed(SEED)
    norm = {"norm_layer": [LayerNorm], "norm_args": [{"normalized_shape": U, "eps": 1e-3}]}
    recurrent = RecurrentModel(S * D + A, H, U)
    representation = RepresentationModel(
        H,
        input_dims=H + E,
        output_dim=S * D,
        hidden_sizes=[U],
        activation=nn.SiLU,
        layer_args={"bias": False},
        flatten_dim=None,
        **norm,
    )
    transition = MLP(
        input_dims=H,
        output_dim=S * D,
        hidden_sizes=[U],
        activation=nn.SiLU,
        layer_args={"bias": False},
        flatten_dim=None,
        **norm,
    )
    rssm = RSSM(recurrent, representation, transition, {"validate_args": False, "type": "auto"}, D, 0.01)
    with torch.no_grad():
        rssm.initial_recurrent_state.copy_(torch.randn(H, generator=gen) * 0.5)
    T, B = dims["T"], dims["B"]
    embed = torch.randn(T, B, E, generator=gen)
    actions = torch.nn.functional.one_hot(torch.randint(A, (T, B), generator=gen), A).float()
    is_first = torch.zeros(T, B, 1)
    is_first[0] = 1
    is_first[3, 1] = 1
    is_first[4, 2] = 1
    h = torch.zeros(1, B, H)
    post = torch.zeros(1, B, S, D)
    hs, posts, post_logits = [], [], []
    with torch.no_grad():
        for t in range(T):
            h, post, logits = rssm.dynamic(post, h, actions[t : t + 1], embed[t : t + 1], is_first[t : t + 1])
            post = post.view(1, B, S, D)
            hs.append(h[0])
            posts.append(post[0])
            post_logits.append(logits[0])
        h_seq = torch.stack(hs)
        prior_logits = rssm.prior_logits(h_seq)
    save_file(
        {k: v.contiguous() for k, v in rssm.state_dict().items()}, str(out / "rssm_weights.safetensors")
    )
    tensors = {
        "embed": embed,
        "prev_action": actions,
        "is_first": is_first,
        "h": h_seq,
        "post_samples": torch.stack(posts),
        "post_logits": torch.stack(post_logits),
        "prior_logits": prior_logits,
    }
    np.savez(out / "rssm_scan.npz", **to_np(tensors))
    (out / "rssm_dims.json").write_text(json.dumps(dims, indent=1) + "\n")


def world_model_loss_fixture(out: Path, gen: torch.Generator) -> None:
    """reconstruction_loss parts (symlog MSE obs, two-hot reward, KL balancing with free bits, continue)."""
    T, B, S, D, OBS = 4, 3, 3, 4, 5
    obs_pred = torch.randn(T, B, OBS, generator=gen)
    obs = torch.randn(T, B, OBS, generator=gen) * 5
    reward_logits = torch.randn(T, B, 255, generator=gen)
    rewards = torch.randn(T, B, 1, generator=gen)
    # Sharp logits give KLs above the free bits in some steps, flat ones below it in others
    prior_logits = torch.randn(T, B, S, D, generator=gen) * torch.linspace(0.1, 3, T).view(T, 1, 1, 1)
    post_logits = torch.randn(T, B, S, D, generator=gen) * torch.linspace(0.1, 3, T).view(T, 1, 1, 1)
    cont_logits = torch.randn(T, B, 1, generator=gen)
    cont_targets = (torch.rand(T, B, 1, generator=gen) > 0.3).float()
    parts = reconstruction_loss(
        {"state": SymlogDistribution(obs_pred, dims=1)},
        {"state": obs},
        TwoHotEncodingDistribution(reward_logits, dims=1),
        rewards,
        prior_logits,
        post_logits,
        kl_dynamic=0.5,
        kl_representation=0.1,
        kl_free_nats=1.0,
        pc=Independent(BernoulliSafeMode(logits=cont_logits), 1),
        continue_targets=cont_targets,
    )
    names = ["total", "kl", "kl_loss", "reward_loss", "observation_loss", "continue_loss"]
    inputs = {
        "obs_pred": obs_pred,
        "obs": obs,
        "reward_logits": reward_logits,
        "rewards": rewards,
        "prior_logits": prior_logits,
        "post_logits": post_logits,
        "cont_logits": cont_logits,
        "cont_targets": cont_targets,
    }
    np.savez(out / "world_model_loss.npz", **to_np(inputs | dict(zip(names, parts, strict=True))))


class _IdentityFabric:
    @staticmethod
    def all_gather(x: torch.Tensor) -> torch.Tensor:
        return x


def behavior_fixture(out: Path, gen: torch.Generator) -> None:
    """Lambda-returns (gamma 1-1/333, lambda 0.95) and five updates of the 5/95 percentile moments."""
    Hn, B = 15, 4
    gamma = 1 - 1 / 333
    rewards = torch.randn(Hn + 1, B, 1, generator=gen)
    values = torch.randn(Hn + 1, B, 1, generator=gen) * 3
    continues = (torch.rand(Hn + 1, B, 1, generator=gen) > 0.1).float()
    lam = compute_lambda_values(rewards[1:], values[1:], continues[1:] * gamma, 0.95)
    moments = Moments(decay=0.99, max_=1.0, percentile_low=0.05, percentile_high=0.95)
    xs = torch.stack([torch.randn(Hn, B, 1, generator=gen) * (i + 1) * 10 for i in range(5)])
    lows, invscales = [], []
    for x in xs:
        low, invscale = moments(x, _IdentityFabric())
        lows.append(low)
        invscales.append(invscale)
    tensors = {
        "rewards": rewards,
        "values": values,
        "continues": continues,
        "lambda_values": lam,
        "moment_inputs": xs,
        "moment_low": torch.stack(lows),
        "moment_invscale": torch.stack(invscales),
    }
    np.savez(out / "behavior.npz", **to_np(tensors))


def ratio_fixture(out: Path, gen: torch.Generator) -> None:
    """Ratio outputs on step sequences, a save/resume mid-sequence, and off_policy_schedule runs."""
    cases = []
    for ratio_value in (0.0, 0.0625, 0.1, 0.5, 1.0, 1 / 3, 2.5):
        for increments in ([1] * 40, [4] * 30, torch.randint(1, 9, (40,), generator=gen).tolist()):
            steps = np.cumsum(increments).tolist()
            ratio = Ratio(ratio_value)
            outputs = [ratio(s) for s in steps]
            # Save after call 10, resume into a fresh Ratio, realign to the last step and continue
            saved = Ratio(ratio_value)
            for s in steps[:10]:
                saved(s)
            state = saved.state_dict()
            resumed = Ratio(0.123).load_state_dict(state)
            resumed.realign(steps[9])
            resumed_outputs = [resumed(s) for s in steps[10:]]
            cases.append(
                {
                    "ratio": ratio_value,
                    "steps": steps,
                    "outputs": outputs,
                    "state_after_10": state,
                    "resumed_outputs": resumed_outputs,
                }
            )
    schedules = []
    for num_envs, learning_starts, pretrain, seq_len, replay_ratio in (
        (1, 0, 0, 4, 0.5),
        (1, 10, 1, 4, 0.5),
        (4, 65, 3, 8, 0.25),
        (2, 0, 5, 16, 1.0),
        (3, 7, 0, 2, 2.0),
    ):
        cfg = OmegaConf.create(
            {
                "dry_run": False,
                "algo": {
                    "learning_starts": learning_starts,
                    "per_rank_pretrain_steps": pretrain,
                    "per_rank_sequence_length": seq_len,
                    "replay_ratio": replay_ratio,
                },
                "checkpoint": {"resume_from": None},
                "buffer": {"checkpoint": True},
            }
        )
        total_iters = 60
        start, train, pre, total, ratio = off_policy_schedule(cfg, None, 1, total_iters, num_envs, 1)
        plans = []
        for iter_num in range(1, total + 1):
            policy_step = iter_num * num_envs
            steps = 0
            if iter_num >= train:
                steps = ratio(policy_step - (train - 1) * num_envs)
                if iter_num == train:
                    steps += pre
            plans.append([iter_num <= start, steps])
        schedules.append(
            {
                "num_envs": num_envs,
                "learning_starts": learning_starts,
                "pretrain_steps": pretrain,
                "seq_len": seq_len,
                "replay_ratio": replay_ratio,
                "train_starts": train,
                "plans": plans,
            }
        )
    (out / "ratio.json").write_text(json.dumps({"cases": cases, "schedules": schedules}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/dreamer_v3"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    two_hot_fixture(args.out, gen)
    rssm_fixture(args.out, gen)
    world_model_loss_fixture(args.out, gen)
    behavior_fixture(args.out, gen)
    ratio_fixture(args.out, gen)
    import sheeprl

    (args.out / "SOURCE.json").write_text(
        json.dumps({"sheeprl": sheeprl.__version__, "torch": torch.__version__, "seed": SEED}, indent=1)
        + "\n"
    )
    for path in sorted(args.out.iterdir()):
        print(f"{path}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
