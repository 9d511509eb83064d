"""The OpenAI-compatible door: /v1/responses and /v1/chat/completions, read in and written back."""
