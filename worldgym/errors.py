"""The library's error types, each a subclass of the matching built-in exception."""

from __future__ import annotations

__all__ = ["CheckpointError"]


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, corrupt, of another format version, or does not fit the model."""


class DatasetError(ValueError):
    """A data file (e.g. a LongHealth JSON) is malformed; the message names the record and field at fault."""


__all__ += ["DatasetError"]


class CartridgeError(ValueError):
    """A cartridge (trainable KV prefix) does not fit the model it is loaded for or used with, or is malformed
    (bad token counts, a text too short for it)."""


__all__ += ["CartridgeError"]
