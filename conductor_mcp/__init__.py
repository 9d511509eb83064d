"""conductor-mcp: a small Conductor LLM writes workflows over a pool of LLM workers; this package runs them."""

import os

# litellm fetches a remote price map at import (seconds of retries offline); its bundled copy is enough.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"
