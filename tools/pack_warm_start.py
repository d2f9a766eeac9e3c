"""Ship a cached warm start inside the package (``worldgym/assets/warm_starts/<key>/``), run by hand.

    python tools/pack_warm_start.py runs/warm_starts/smollm2-135m-CSRPhone-v0-dfe6e04bdcf4 [--float16]

``load_or_train_warm_start`` falls back to the shipped copy when its cache folder has none, so a fresh clone
skips the SFT (about an hour on 2 CPU cores for SmolLM2). ``--float16`` stores float32 tensors as float16 (half
the size; loading casts them back to the model's dtype): measure a warm start's figures on the shipped copy, not
on the float32 one it came from. ``warm_start.json`` records the stored dtype and drops the per-step SFT losses
(the first and last stay in its summary). An adapter's folder ships without its tokenizer files (loading takes
the tokenizer from ``load_chat_model``, as for the cached copy) and without PEFT's model card, and its
``adapter_config.json`` names the base model by the warm start's model name instead of this machine's path.
The copy gets a fresh SHA-256 manifest, checked when it is loaded.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from worldgym.agents.llm.warm_start import PACKAGED_WARM_STARTS, WARM_START_KIND
from worldgym.checkpointing import FORMAT_VERSION, write_manifest


def pack(source: Path, float16: bool) -> Path:
    """Copy the warm start in ``source`` to the package's assets; returns the new folder."""
    if not (source / "warm_start.json").is_file():
        raise FileNotFoundError(f"{source} holds no complete warm start (no warm_start.json)")
    target = PACKAGED_WARM_STARTS / source.name
    if target.exists():
        raise FileExistsError(f"{target} exists: remove it first")
    adapter = (source / "adapter_config.json").is_file()
    left_out = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                "README.md")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*left_out) if adapter else None)
    record = json.loads((target / "warm_start.json").read_text())
    if adapter:
        adapter_config = json.loads((target / "adapter_config.json").read_text())
        adapter_config["base_model_name_or_path"] = record["config"]["model"]
        (target / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2, sort_keys=True))
    record["summary"]["losses"] = None
    record["stored_dtype"] = "float16" if float16 else "as trained"
    if float16:
        for path in target.glob("*.safetensors"):
            tensors = load_file(path)
            save_file({name: t.half() if t.dtype == torch.float32 else t for name, t in tensors.items()}, path,
                      metadata={"format": "pt"})
    (target / "warm_start.json").write_text(json.dumps(record, indent=1))
    write_manifest(target, WARM_START_KIND, FORMAT_VERSION)  # the files changed: checksum them afresh
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="a cached warm start folder (runs/warm_starts/<key>)")
    parser.add_argument("--float16", action="store_true", help="store float32 tensors as float16")
    args = parser.parse_args()
    target = pack(args.source, args.float16)
    size = sum(p.stat().st_size for p in target.iterdir()) / 2**20
    print(f"shipped {target} ({size:.1f} MiB)")


if __name__ == "__main__":
    main()
