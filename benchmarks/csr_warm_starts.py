"""Which CSR warm start a benchmark stage trains, evaluates or starts from: the preset's own, or one trained on
further (``--continue-on``) and/or on chats with injected mistakes (``--mistake-rate``). Shared by
``csr_policy.py`` and ``csr_dual_lora_vs_dapo.py`` so that both name, cache and record a warm start alike.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from worldgym.agents.llm.warm_start import WarmStart, WarmStartConfig, is_cached, load_or_train_warm_start

DIFFICULTIES = (1, 2, 3, 4, 5)


def warm_start_flags() -> argparse.ArgumentParser:
    """A parent parser with ``--mistake-rate`` and ``--continue-on`` (``argparse.ArgumentParser(parents=[...])``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--mistake-rate", type=float, default=0.0,
                        help="the warm start trained on expert chats with this share of injected, untrained "
                             "mistakes (WarmStartConfig.mistake_rate; its own cache and part files)")
    parser.add_argument("--continue-on", type=int, nargs="+", choices=DIFFICULTIES,
                        help="the preset's warm start trained on further, on these difficulties' expert chats (with "
                             "--mistake-rate's mistakes), instead of one trained from the model")
    return parser


def chosen_config(base: WarmStartConfig, args: argparse.Namespace) -> WarmStartConfig:
    """``base`` (a preset's warm start) with the flags' changes: continued from it, with mistakes, or as it is."""
    config = base
    if args.continue_on:  # the preset's warm start trained on, on these difficulties' chats
        config = replace(config, continue_from=base.key(), difficulties=tuple(args.continue_on))
    if args.mistake_rate:  # its chats with injected, untrained mistakes
        config = replace(config, mistake_rate=args.mistake_rate)
    return config


def selected_config(base: WarmStartConfig, args: argparse.Namespace, **overrides: Any) -> WarmStartConfig:
    """:func:`chosen_config`, with ``overrides`` applied when it is not ``base`` itself (what
    :func:`load_chosen` loads; its ``key()`` names the warm start without loading it)."""
    config = chosen_config(base, args)
    return replace(config, **overrides) if config != base and overrides else config


def load_chosen(base: WarmStartConfig, args: argparse.Namespace, cache: Path, **overrides: Any) -> WarmStart:
    """The warm start the flags select, from ``cache`` or trained into it (a continued one's base first, if it
    is not cached either); ``overrides`` change the selected config when it is not ``base`` itself (e.g. a
    quick run's few chats)."""
    config = selected_config(base, args, **overrides)
    device = getattr(args, "device", None)  # where a warm start that is not cached yet trains
    if config.continue_from and not is_cached(config, cache):
        load_or_train_warm_start(base, cache_dir=cache, device=device)
    return load_or_train_warm_start(config, cache_dir=cache, device=device)


def warm_start_suffix(args: argparse.Namespace) -> str:
    """Names of the warm start ``args`` select: "" for the preset's, else e.g. ``-mistakes0.2-continued-d3``."""
    return ((f"-mistakes{args.mistake_rate:g}" if args.mistake_rate else "")
            + ("-continued-d" + "".join(map(str, args.continue_on)) if args.continue_on else ""))


def warm_start_command(args: argparse.Namespace) -> str:
    """The warm-start flags given, as they were written (for a results file's ``command``)."""
    return ((f" --mistake-rate {args.mistake_rate:g}" if args.mistake_rate else "")
            + (" --continue-on " + " ".join(map(str, args.continue_on)) if args.continue_on else ""))
