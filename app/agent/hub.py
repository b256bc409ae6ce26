"""The MCP servers of a chat, behind one thread-safe synchronous object (`ToolHub`).

The MCP SDK is asyncio (anyio); Hearth's callers are a Qt window and a terminal loop. The hub
runs one asyncio loop on its own daemon thread; each server lives there in one task that owns
its connection (the SDK's transport and `ClientSession` context managers must be entered and
left in the same task). The public methods submit coroutines to that loop and wait.

Lifecycle of a server: "stopped" until something needs it (`tools()` or `call()` starts it:
on demand); "starting" while its process starts (or its HTTP session opens) and it answers
`initialize` and `tools/list`; "running"; "failed" with a sentence when it could not start,
stopped during a call (its process died, its HTTP endpoint went away) or did not answer a call
in time (it is then stopped, in case it hangs). A failed server is started again by the next
call that needs it. One server's failure is only its own calls' error results: nothing raises.
`close()` (or `set_servers` dropping one) stops the servers: a stdio server's stdin is closed,
then it is terminated and killed (the SDK's escalation).

A stdio server's stderr goes to `<logs>/mcp/<server>.log`; its last line is quoted in the
sentence when it fails to start.

Names: the model calls a tool by `<server slug>__<tool>` (`specs.qualified_name`). Two enabled
servers whose names could give the same such name (`specs.names_clash`: "a.b" and "a_b") are
both refused ("failed", with a sentence saying to rename one) and offer no tools, so a name
the user approves is always the (server, tool) pair that runs.

The hub is put together from parts, each with its own module: `hub_base.HubBase` the thread,
the servers' table and states; `hub_connection.HubConnections` one server's connection
(start on demand, hold, stop) and the time limit of its requests; `hub_tools.HubTools` the
tools (`tools`, `call`); `hub_features.HubFeatures` the prompts and resources. Import the hub
and its types from here.
"""

from __future__ import annotations

from .hub_base import ElicitHandler, HubError, ServerStatus
from .hub_features import HubFeatures
from .hub_tools import HubTools
from .specs import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_RESULT_LIMIT,
    DEFAULT_START_TIMEOUT,
    ToolResult,
    ToolSpec,
    qualified_name,
)

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_RESULT_LIMIT",
    "DEFAULT_START_TIMEOUT",
    "ElicitHandler",
    "HubError",
    "ServerStatus",
    "ToolHub",
    "ToolResult",
    "ToolSpec",
    "qualified_name",
]


class ToolHub(HubTools, HubFeatures):
    """The MCP servers of `servers` (see the module doc for their lifecycle): their tools
    (`tools`, `call`: hub_tools.py), prompts and resources (`prompts`, `get_prompt`,
    `resources`, `read_resource`: hub_features.py) and the questions they ask during a call
    (`on_elicit`: hub_connection.py); `status`, `on_status`, `set_servers` and `close` are
    hub_base.py's.

    `call_timeout`: seconds a call may take before it is an error result and its server is
    restarted. `result_limit`: characters of one result's text (the cut is said in it).
    `start_timeout`: seconds a server may take to start and list its tools.
    `log_dir`: where stdio servers' stderr goes (default `<hearth logs>/mcp`).
    Thread-safe; `on_status` callbacks run on the hub's thread."""
