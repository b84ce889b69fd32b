"""The OpenAI API's request bodies (what ``marin serve`` reads of them) and its error shape.

Bodies are checked strictly (a string where a number belongs is refused, not converted), and every
refusal is one :class:`ApiError`: status 400 and OpenAI's ``{"error": {"message", "type", "param",
"code"}}`` naming the field at fault.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["MAX_TOP_LOGPROBS", "ApiError", "ChatMessage", "ChatRequest", "CompletionRequest", "parse_body"]

MAX_STOP_STRINGS = 4
"""Stop strings one request may give (OpenAI's limit)."""

MAX_TOP_LOGPROBS = 20
"""The most alternatives a request may ask for at each token (OpenAI's chat limit; its legacy
completions allow 5): the server's decoder selects this many on the device in the steps where a
request in flight asks for any."""


class ApiError(Exception):
    """A request the server refuses: ``status`` and OpenAI's error body."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind

    def body(self) -> dict[str, Any]:
        """OpenAI's error JSON."""
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    # Strict: "5" is not 5. Fields the server does not use (user, presence_penalty ...) are ignored.
    model_config = ConfigDict(strict=True, extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    stream: bool = False

    def stop_strings(self) -> tuple[str, ...]:
        """``stop`` as a tuple (at most :data:`MAX_STOP_STRINGS` non-empty strings)."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP_STRINGS or not all(stops):
            raise ApiError(f"stop must be at most {MAX_STOP_STRINGS} non-empty strings, got {self.stop!r}",
                           param="stop")
        return tuple(stops)


class CompletionRequest(_Request):
    """``POST /v1/completions``."""

    prompt: str | list[str] | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    """The chosen tokens' log-probabilities (0), and that many likeliest alternatives at each (n > 0)."""
    echo: bool = False

    def top_count(self) -> int:
        """Alternatives a choice keeps at each token."""
        return self.logprobs or 0

    def prompts(self) -> list[str | list[int]]:
        """The prompts: one string, several, or one list of token ids."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if self.prompt and all(isinstance(p, int) for p in self.prompt):
            return [list(self.prompt)]  # type: ignore[arg-type]
        if not self.prompt:
            raise ApiError("prompt must not be empty", param="prompt")
        return list(self.prompt)  # type: ignore[arg-type]


class ChatMessage(BaseModel):
    """One message of a chat request."""

    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    """The likeliest alternatives at each token (with ``logprobs: true``)."""

    def top_count(self) -> int:
        """Alternatives a choice keeps at each token.

        Raises:
            ApiError: ``top_logprobs`` without ``logprobs: true``.
        """
        if self.top_logprobs and not self.logprobs:
            raise ApiError(f"top_logprobs={self.top_logprobs} needs logprobs: true", param="top_logprobs")
        return self.top_logprobs or 0


def parse_body(raw: bytes, kind: type[_Request]) -> Any:
    """The request ``raw`` holds, checked.

    Raises:
        ApiError: not JSON, not an object, or a field missing or of the wrong type or range (named).
    """
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(f"the body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(f"the body must be a JSON object, got {type(data).__name__}")
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(f"{where}: {first['msg']} (got {first.get('input')!r})"[:500], param=where) from None
