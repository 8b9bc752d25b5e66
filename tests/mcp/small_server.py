"""A small real MCP server (stdio) for the proxy's tests: a status tool that always answers
the same, a tool that fails, and a counter whose answers change."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("loopguard-test-server")
_count = {"n": 0}


@server.tool()
def build_status(job: str) -> str:
    """The status of a build job (it never changes: polling it is a loop)."""
    return f"job {job}: running"


@server.tool()
def deploy(target: str) -> str:
    """A deploy that always fails."""
    raise ValueError(f"deploy to {target} refused: credentials expired")


@server.tool()
def next_number() -> int:
    """A different number on each call."""
    _count["n"] += 1
    return _count["n"]


if __name__ == "__main__":
    server.run("stdio")
