"""Check that vLLM serves an LLM export as plain transformers + PEFT run it: the same greedy tokens.

vLLM cannot share the project's environment (its CPU and CUDA builds pin older transformers), so the check runs in
two environments, run by hand:

    python tools/check_export_vllm.py make runs/vllm_check          # the project's venv: export + expected tokens
    /path/to/vllm-venv/bin/python tools/check_export_vllm.py serve runs/vllm_check   # vLLM's venv

``make`` builds a tiny Qwen3 LoRA policy that also trains the embedding rows of two added tokens (as the SmolLM2
CSR warm start does), exports it with :func:`worldgym.agents.llm.export.export_policy`, and writes the prompts and
each one's greedy continuation from ``PeftModel.from_pretrained`` to ``expected.json``. ``serve`` loads the
export's ``base_model/`` in vLLM (float32), serves the adapter folder through ``LoRARequest``, decodes the same
prompts greedily and writes ``vllm.json`` with the comparison; it exits 1 when any continuation differs. It
imports nothing from worldgym.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NEW_TOKENS = 12


def make(folder: Path) -> None:
    """Export a LoRA policy with trained token rows to ``folder/export`` and record PEFT's greedy tokens."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from worldgym.agents.llm.adapters import seeded_lora
    from worldgym.agents.llm.export import export_policy
    from worldgym.agents.llm.models import build_tiny_model, sharpen
    from worldgym.agents.llm.tokenizer import train_chat_tokenizer

    corpus = [f"Call {n} and ask for account {n * 7}; the agent answers with code {n * 13}." for n in range(300)]
    tokenizer = train_chat_tokenizer(corpus, vocab_size=400)
    added = [len(tokenizer) - 2, len(tokenizer) - 1]
    policy = seeded_lora(sharpen(build_tiny_model(tokenizer, size="small", seed=0), 3.0), 0, rank=4, alpha=8,
                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                         init_lora_weights=False, trainable_token_indices={"embed_tokens": added})
    with torch.no_grad():  # trained rows of the base's own scale, unlike the base's rows for those tokens
        embedding = policy.get_base_model().get_input_embeddings().token_adapter.base_layer.weight
        for name, parameter in policy.named_parameters():
            if "trainable_tokens_delta" in name:
                parameter.copy_(embedding[10:12] * 1.5)
    out = export_policy(policy.eval(), tokenizer, folder / "export")
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(out / "base_model"), out).eval()
    prompts = [tokenizer(text)["input_ids"] + [added[index % 2]] for index, text in
               enumerate(["Call 12 and ask for", "the agent answers with code", "ask for account 91"])]
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            generated = reloaded.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                          max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                          pad_token_id=tokenizer.pad_token_id)
            expected.append(generated[0, len(prompt):].tolist())
    (folder / "expected.json").write_text(json.dumps({"prompts": prompts, "tokens": expected}, indent=1) + "\n")
    print(f"exported to {out}; PEFT's greedy tokens in {folder / 'expected.json'}")


def serve(folder: Path) -> bool:
    """Decode the recorded prompts with vLLM serving the export; whether every continuation matched."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    expected = json.loads((folder / "expected.json").read_text())
    export = folder / "export"
    llm = LLM(model=str(export / "base_model"), skip_tokenizer_init=True, dtype="float32", enable_lora=True,
              max_lora_rank=8, max_model_len=256, enforce_eager=True, kv_cache_memory_bytes=256 * 2**20)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=prompt) for prompt in expected["prompts"]], params,
                           lora_request=LoRARequest("policy", 1, str(export)))
    served = [list(output.outputs[0].token_ids) for output in outputs]
    same = [tokens == want for tokens, want in zip(served, expected["tokens"])]
    # the control: without the adapter the continuations differ, so the adapter was served, not ignored
    plain = llm.generate([TokensPrompt(prompt_token_ids=prompt) for prompt in expected["prompts"]], params)
    without_adapter = [list(output.outputs[0].token_ids) == want for output, want in zip(plain, expected["tokens"])]
    import vllm

    (folder / "vllm.json").write_text(json.dumps({"vllm": vllm.__version__, "tokens": served, "same": same,
                                                  "same_without_adapter": without_adapter}, indent=1) + "\n")
    print(f"vLLM {vllm.__version__}: {sum(same)} of {len(same)} greedy continuations equal PEFT's "
          f"({sum(without_adapter)} without the adapter)")
    return all(same) and not all(without_adapter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["make", "serve"])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    if args.stage == "make":
        make(args.folder)
    elif not serve(args.folder):
        sys.exit(1)


if __name__ == "__main__":  # vLLM's CPU build spawns worker processes, which import this file again
    main()
