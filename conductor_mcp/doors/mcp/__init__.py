"""The MCP door: the tools and resources, Tasks, roots, sampling of the host's model, and the results
a calling model reads."""
