"""The dual-LoRA debugging subcommands on a tiny two-step run: real figures, exit codes, named errors."""

import dataclasses
import io
import itertools
import json
import re

import pytest
from rich.console import Console

from worldgym.agents.dual_lora import debug
from worldgym.agents.dual_lora.objective import WorldModelObjective
from worldgym.agents.dual_lora.world_model import PhoneCallExample
from worldgym.agents.llm.engines import Generation
from worldgym.agents.llm.models import build_tiny_model
from worldgym.envs.csr_phone.phrases import RESPONSE_TYPES
from worldgym.spaces import ToolCall
from worldgym.wrappers import format_tool_call

from .test_trainer import _trainer

NUMBER = re.compile(r"\d-\d{3}-\d{3}-\d{4}")


class DialingEngine:
    """Searches the task's company, then dials the numbers the search listed, one per turn (so the CSR gives
    several response types); logprob -1 per token."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def sync_weights(self):
        pass

    def generate(self, prompts, params, constraints=None):
        return [[self._reply(self.tokenizer.decode(prompt))] for prompt in prompts]

    def _reply(self, text):
        calls = text.count("<tool_response>")
        if calls == 0:
            company = re.search(r"Company: (.+)", text).group(1).strip()
            name, arguments = "search_company", {"company": company}
        else:
            numbers = NUMBER.findall(text)
            name, arguments = "make_phone_call", {"phone_number": numbers[(calls - 1) % len(numbers)]}
        reply = format_tool_call(ToolCall(name, arguments))
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return Generation(ids, [-1.0] * len(ids), "stop")


@pytest.fixture(scope="module")
def run(tmp_path_factory, csr_tokenizer):
    """A two-step run validated at every step, saved as ``checkpoint-last``."""
    trainer = _trainer(tmp_path_factory.mktemp("debug"), csr_tokenizer, eval_every=1, max_turns=4,
                       loss_ratio_band=(0.25, 4.0))
    trainer.engine = trainer.collector.engine = trainer.eval_collector.engine = DialingEngine(csr_tokenizer)
    rewards = itertools.cycle([1.0, 0.0])  # rewards that differ within each group: L_policy is not 0
    trainer.reward_fn = lambda episode: next(rewards)
    trainer.train()
    return trainer.output_dir


def _base(tokenizer):
    return debug.Base(build_tiny_model(tokenizer, seed=0), tokenizer, lambda policy: DialingEngine(tokenizer))


def test_analyze_responses_reports_each_type_at_the_first_and_last_evaluation(run):
    records = debug.read_metrics(run)
    result = debug.analyze_responses(run)
    figures = result.figures
    assert (figures["evaluations"], figures["first_step"], figures["last_step"]) == (3, 0, 2)
    seen = {t for t, row in figures["response_types"].items() if row["last"]["calls"]}
    assert len(seen) >= 2 and seen <= set(RESPONSE_TYPES)
    for response_type in seen:
        assert figures["response_types"][response_type]["last"]["token_accuracy"] == \
            records[-1][f"eval/wm_{response_type}/token_accuracy"]
    assert sum(figures["response_types"][t]["last"]["calls"] for t in seen) == figures["overall"]["last"]["calls"]


def test_compare_losses_counts_steps_outside_the_checkpoints_band(run, tmp_path):
    figures = debug.compare_losses([run]).figures["runs"][0]
    assert figures["band"] == [0.25, 4.0] and figures["config_from"].endswith("checkpoint-last")
    assert figures["steps"] == 2 and figures["lambda"]["last"] == 0.5 and figures["ratio"]["steps"] == 2
    ratios = [r["wm/loss_ratio"] for r in debug.read_metrics(run) if "wm/loss_ratio" in r]
    assert figures["ratio"]["first"] == pytest.approx(ratios[0])
    assert figures["ratio"]["outside_band"] == sum(not 0.25 <= r <= 4.0 for r in ratios)
    assert debug.compare_losses([run], band=(1e-12, 1e12)).figures["runs"][0]["ratio"]["outside_band"] == 0
    assert debug.compare_losses([run], band=(1e-12, 1e-11)).figures["runs"][0]["ratio"]["outside_band"] == 2
    out = tmp_path / "losses.json"
    argv = ["compare-losses", str(run), str(run), "--json", str(out)]
    assert debug.main(argv, Console(file=io.StringIO())) == 0
    assert [r["success"]["last_step"] for r in json.loads(out.read_text())["runs"]] == [2, 2]


def test_inspect_predictions_pairs_each_call_with_the_real_reply(run, csr_tokenizer):
    figures = debug.inspect_predictions(run, _base(csr_tokenizer), episodes=2, max_new_tokens=8).figures
    calls = [call for episode in figures["episodes"] for call in episode["calls"]]
    assert figures["step"] == 2 and len(calls) == figures["calls"] == 6  # 4 turns: a search, then 3 calls
    assert all('"make_phone_call"' in c["call"] and c["reply"] and 0 <= c["token_accuracy"] <= 1 for c in calls)
    assert {c["response_type"] for c in calls} <= set(RESPONSE_TYPES)
    assert all(len(csr_tokenizer(c["prediction"], add_special_tokens=False)["input_ids"]) <= 8 for c in calls)


def test_check_gradients_reaches_both_adapters_and_no_base_weight(run, csr_tokenizer):
    result = debug.check_gradients(run, _base(csr_tokenizer))
    adapters = result.figures["adapters"]
    assert result.exit_code == 0 and result.figures["problems"] == [] and result.figures["wm_calls"] > 0
    assert adapters["policy"]["should_train"] and adapters["policy"]["grad_norm"] > 0
    assert adapters["world_model"]["should_train"] and adapters["world_model"]["grad_norm"] > 0
    assert adapters["world_model"]["grad_none"] == 0 and result.figures["base_tensors_with_grad"] == 0


def test_check_gradients_fails_when_an_adapter_that_should_train_gets_nothing(run, csr_tokenizer, monkeypatch):
    # a world model whose loss never reaches its adapter: λ > 0 but the loss is cut from the graph
    real = WorldModelObjective.loss
    monkeypatch.setattr(WorldModelObjective, "loss",
                        lambda self, rows, *shard: (real(self, rows, *shard)[0].detach(), {}))
    result = debug.check_gradients(run, _base(csr_tokenizer))
    assert result.exit_code == 1
    assert result.figures["problems"] == ["adapter 'world_model' should train at this step but got no gradient"]


def test_validate_trajectories_passes_a_sound_run_and_names_a_broken_example(run, csr_tokenizer, monkeypatch):
    result = debug.validate_trajectories(run, _base(csr_tokenizer), episodes=2)
    assert result.exit_code == 0, result.figures["problems"]
    assert result.figures["replay_examples"] > 0 and result.figures["episode_calls"] == 6
    assert set(result.figures["replay_types"]) <= set(RESPONSE_TYPES)
    example = PhoneCallExample((1, 2, 3), 2, "gossip")
    problems = debug.example_problems(example, csr_tokenizer)
    assert any("<|predict_csr|>" in p for p in problems) and any("gossip" in p for p in problems)
    assert any("<|/csr|>" in p for p in problems)


def test_episode_problems_catches_a_shifted_span_and_a_wrong_mask(run, csr_tokenizer):
    trainer = debug.load_trainer(run, _base(csr_tokenizer))
    (episode,) = debug.validation_episodes(trainer, 1)
    assert debug.episode_problems(episode, csr_tokenizer) == []
    turn = episode.turns[1]
    shifted = dataclasses.replace(episode, turns=[*episode.turns[:1], dataclasses.replace(
        turn, action_span=(turn.action_span[0] + 1, turn.action_span[1])), *episode.turns[2:]])
    assert "turn 1: action span" in debug.episode_problems(shifted, csr_tokenizer)[0]
    mask = list(episode.action_mask)
    mask[episode.prompt_length - 1] = 1
    masked = dataclasses.replace(episode, action_mask=mask)
    assert debug.episode_problems(masked, csr_tokenizer) == [
        f"action_mask differs from the turns' spans at 1 tokens (first: {episode.prompt_length - 1})"]


def test_user_errors_exit_2_naming_the_path_and_the_corrupt_file(run, tmp_path):
    console = Console(file=io.StringIO())
    assert debug.main(["analyze-responses", str(tmp_path / "nowhere")], console) == 2
    assert debug.main(["check-gradients", str(tmp_path / "nowhere")], console) == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in (run / "checkpoint-last").iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    data = bytearray((broken / "state.json").read_bytes())
    data[-2:-1] = b" "
    (broken / "state.json").write_bytes(bytes(data))
    assert debug.main(["validate-trajectories", str(broken)], console) == 2
    text = console.file.getvalue()
    assert f"{tmp_path / 'nowhere'} is not a run directory" in text
    assert f"{tmp_path / 'nowhere'} does not exist" in text
    assert f"{broken / 'state.json'} is corrupt" in text and "Traceback" not in text
