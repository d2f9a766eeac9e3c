"""Wrappers: text/tool-call bridges and other env transforms."""

from worldgym.wrappers.tool_call_text import ParseToolCall, format_tool_call, parse_tool_call

__all__ = ["ParseToolCall", "format_tool_call", "parse_tool_call"]
