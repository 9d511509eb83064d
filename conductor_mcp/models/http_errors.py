"""How a call on the direct HTTP path (openai_http.py) fails, without litellm: one class per failure, named as
litellm names the same failure of the same call (an attempt reads `RateLimitError: ...` either way), transient ones
retried as litellm's are. litellm's own classes would import litellm (~3 s of CPU on a 2-core machine), which the
embedded model's path otherwise never needs."""

from __future__ import annotations

from conductor_mcp.core.limits import ERROR_BODY_CHARS

# OpenAI's finish reasons, and the other names OpenAI-compatible servers (vLLM, llama.cpp, TGI) give them, as litellm
# maps them; anything else reads "stop", as with litellm.
_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "function_call",
    "content_filter": "content_filter",
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "error": "stop",
}


def finish_reason(reason: str) -> str:
    """A server's finish reason in OpenAI's words."""
    return _FINISH_REASONS.get(reason, "stop")


class CallError(Exception):
    """A direct call that failed: an error status, no connection, no answer in time. Not retried unless it is a
    TransientError: the same request would fail again."""

    def __init__(self, message: str, model: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.status_code = status_code


class TransientError(CallError):
    """A failure that a later try may not meet (overload, a dropped connection, a slow answer): retried."""


class BadRequestError(CallError): ...


class AuthenticationError(CallError): ...


class NotFoundError(CallError): ...


class APIError(CallError): ...


class Timeout(TransientError): ...


class RateLimitError(TransientError): ...


class InternalServerError(TransientError): ...


class BadGatewayError(TransientError): ...


class ServiceUnavailableError(TransientError): ...


class APIConnectionError(TransientError): ...


# HTTP status -> (class, the prefix litellm's message carries), as litellm maps them for an OpenAI-compatible server.
_BY_STATUS: dict[int, tuple[type[CallError], str]] = {
    400: (BadRequestError, ""),
    401: (AuthenticationError, "AuthenticationError: "),
    404: (NotFoundError, "NotFoundError: "),
    408: (Timeout, "Timeout Error: "),
    422: (BadRequestError, ""),
    429: (RateLimitError, "RateLimitError: "),
    500: (InternalServerError, "InternalServerError: "),
    502: (BadGatewayError, "BadGatewayError: "),
    503: (ServiceUnavailableError, "ServiceUnavailableError: "),
    504: (Timeout, "Timeout Error: "),
}
PROVIDER = "Hosted_vllmException"  # how litellm's messages name the server that answered


def status_error(status: int, body: bytes, model: str) -> CallError:
    """The failure an error status means, its message carrying the server's body (cut short: it is untrusted)."""
    kind, prefix = _BY_STATUS.get(status, (APIError, "APIError: "))
    return kind(f"{prefix}{PROVIDER} - {body[:ERROR_BODY_CHARS].decode(errors='replace')}", model, status)
