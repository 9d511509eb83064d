"""The HTTP server: transport, guards, auth and who a request acts for; MCP, OpenAI and the viewer mount on it."""
