"""conductor-mcp: a small Conductor LLM writes workflows over a pool of LLM workers; this package runs them."""

__version__ = "0.1.0"
