"""How a conductor-mcp process runs: its event loop, task ownership, logs, private files and the sandbox."""
