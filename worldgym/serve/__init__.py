"""An OpenEnv server for any worldgym text or tool-call env: ``worldgym serve ENV_ID`` or :func:`create_app`.

Needs the ``interop`` extra (openenv-core, fastapi, uvicorn). Tool envs expose their ``ToolCallSpace`` as MCP
tools and take ``call_tool`` actions; text envs take ``{"text": ...}``. Each WebSocket connection is one session
with its own env instance. What one client may cost the server is bounded (:class:`ServeLimits`); an optional
bearer token guards every route (docs/interop.md, "Exposure and limits").
"""

try:
    import fastapi  # noqa: F401
    import openenv.core.env_server  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as error:  # exercised by tests/test_interop_extra.py
    raise ImportError(
        "worldgym.serve needs openenv-core, fastapi and uvicorn: install worldgym with the `interop` extra "
        "(pip install 'worldgym[interop]')"
    ) from error

from worldgym.serve.app import build_server, create_app, serve
from worldgym.serve.environment import GymEnvironment
from worldgym.serve.limits import ServeLimits

__all__ = ["GymEnvironment", "ServeLimits", "build_server", "create_app", "serve"]
