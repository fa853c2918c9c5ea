"""A request ``trials serve`` refuses: the HTTP code, Google's status name and the message, in Google's error shape."""

from __future__ import annotations

from typing import Any

# Google's status name of each HTTP code the server answers (google.rpc.Code over REST).
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                409: "ALREADY_EXISTS", 415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                501: "UNIMPLEMENTED", 503: "UNAVAILABLE"}


class ApiError(Exception):
    """A request refused: the HTTP code, Google's status name and the message the SDK shows."""

    def __init__(self, code: int, message: str, status: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS_NAMES.get(code, "UNKNOWN")

    def body(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "status"}}``, as Google's APIs answer over REST."""
        return {"error": {"code": self.code, "message": self.message, "status": self.status}}
