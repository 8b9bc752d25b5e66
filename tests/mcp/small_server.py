"""A small real MCP server (stdio) for the proxy's tests: a status tool that always answers
the same, a tool that fails, and a counter whose answers change."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("loopguard-test-server")
_count = {"n": 0}


def _ran(tool: str) -> None:
    """Each call the server really ran, one line each, for the tests to count."""
    path = os.environ.get("SMALL_SERVER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(tool + "\n")


@server.tool()
def build_status(job: str) -> str:
    """The status of a build job (it never changes: polling it is a loop)."""
    _ran("build_status")
    return f"job {job}: running"


@server.tool()
def deploy(target: str) -> str:
    """A deploy that always fails."""
    _ran("deploy")
    raise ValueError(f"deploy to {target} refused: credentials expired")


@server.tool()
def fetch_quota(region: str) -> str:
    """A service that is down, whatever the region."""
    _ran("fetch_quota")
    raise ValueError("quota service unavailable (503)")


@server.tool()
def next_number() -> int:
    """A different number on each call."""
    _ran("next_number")
    _count["n"] += 1
    return _count["n"]


if __name__ == "__main__":
    server.run("stdio")
