"""The library's error types: each derives from :class:`WorldgymError` (catch every library error with it) and
from the matching built-in exception (``except ValueError`` keeps working)."""

from __future__ import annotations

__all__ = ["CheckpointError", "CheckpointNotFoundError", "ConfigError", "RunFileError", "WorldgymError"]


class WorldgymError(Exception):
    """Base of every error the library raises on purpose (bad input, a broken file, a failed training run)."""


class CheckpointError(WorldgymError, ValueError):
    """A checkpoint is missing, incomplete, corrupt, of another format version, or does not fit the model."""


class RunFileError(CheckpointError):
    """A file a checkpoint shares with others in its run folder (e.g. a Dreamer replay segment under ``replay/``)
    is missing or differs from the SHA-256 the checkpoint's manifest records; the message names the file."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint (or warm start) is saved where one was asked for; the message says how to make it."""


class ConfigError(WorldgymError, ValueError):
    """A setting of a config, an env constructor or a function is invalid, or a settings file (or a value it
    holds) does not fit the run's config. One message style for all: ``<name>=<value!r> is invalid: <how to fix
    it>`` (:func:`worldgym.config.check_field`); a settings file's message starts with the file and names the
    field's path (:mod:`worldgym.config_types`, :mod:`worldgym.config_file`)."""


class DatasetError(WorldgymError, ValueError):
    """A data file (e.g. a LongHealth JSON) is malformed; the message names the record and field at fault."""


__all__ += ["DatasetError"]


class CartridgeError(WorldgymError, ValueError):
    """A cartridge (trainable KV prefix) does not fit the model it is loaded for or used with, or is malformed
    (bad token counts, a text too short for it)."""


__all__ += ["CartridgeError"]


class RemoteEnvError(WorldgymError, ConnectionError):
    """An env server (OpenEnv protocol) could not be reached, stopped answering within the client's timeout,
    closed the session, or answered a request with an error; the message names the server and the request."""


class RemoteEnvSchemaError(WorldgymError, ValueError):
    """An env server's action schema or tool list has no Gymnasium form here (e.g. an action with several
    fields, a tool name that is not an identifier); the message names the server and what it declared."""


__all__ += ["RemoteEnvError", "RemoteEnvSchemaError"]


class RunFolderError(WorldgymError, ValueError):
    """A folder given as a run (``worldgym runs``, ``worldgym export``) holds no run, or a requested part of it
    (a step, an episode) is not there; the message names the folder and what it has."""


__all__ += ["RunFolderError"]


class ExportError(WorldgymError, ValueError):
    """A run's policy cannot be exported (``worldgym export``): the run kept nothing to rebuild it from, or a
    checkpoint does not fit what it kept; the message names the run and how to export another way."""


__all__ += ["ExportError"]
