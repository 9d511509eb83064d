"""The command line: `conductor-mcp` and its commands (run, serve, tokens, install HOST), and how it writes."""
