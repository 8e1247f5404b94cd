"""OpenAI-style errors: every failure is `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

ERROR_TYPE_OF_STATUS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                        405: "invalid_request_error", 422: "invalid_request_error", 503: "service_unavailable"}


class APIError(Exception):
    def __init__(self, status_code: int, message: str, param: str | None = None, code: str | None = None,
                 error_type: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type or ERROR_TYPE_OF_STATUS.get(status_code, "server_error")

    def body(self) -> dict:
        return error_body(self.message, self.error_type, self.param, self.code)


def error_body(message: str, error_type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)


async def _api_error(_: Request, exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status_code)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """Malformed JSON and wrong types: 400 naming the first offending field, as OpenAI does."""
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(part) for part in first.get("loc", ()) if part != "body" and not _is_type_tag(part)]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        param = None
        message = f"request body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}"
        code = "invalid_json"
    else:
        message, code = f"{param or 'body'}: {first.get('msg', 'invalid value')}", "invalid_value"
    return JSONResponse(error_body(message, "invalid_request_error", param, code), status_code=400)


def _is_type_tag(part) -> bool:
    """pydantic puts the union member it tried into `loc` (`stop.str`, `prompt.list[int]`): not a field name."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none") or "[" in part)


async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    error_type = ERROR_TYPE_OF_STATUS.get(exc.status_code, "server_error")
    return JSONResponse(error_body(str(exc.detail), error_type), status_code=exc.status_code)


async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(error_body(f"internal error: {exc}", "server_error"), status_code=500)
