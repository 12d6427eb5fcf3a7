"""Request and response helpers shared by the route modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from cloister_approval.errors import HubError

ModelT = TypeVar("ModelT", bound=BaseModel)
MAX_BODY = 64 * 1024


class BadRequestError(HubError):
    status = 400


async def read_model(request: Request, model: type[ModelT]) -> ModelT:
    """The request's JSON body as *model*; 400 with pydantic's errors otherwise."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    if content_type != "application/json":
        # Forms cannot send JSON cross-site without a CORS preflight, which we never allow.
        raise BadRequestError(f"expected Content-Type application/json, got {content_type!r}")
    body = await request.body()
    if len(body) > MAX_BODY:
        raise BadRequestError(f"request body larger than {MAX_BODY} bytes")
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        details = [
            {"loc": list(item["loc"]), "msg": item["msg"]}
            for item in error.errors(include_url=False, include_input=False)
        ]
        raise BadRequestError(f"invalid {model.__name__}", details) from None


def json_response(
    payload: BaseModel | Sequence[BaseModel] | dict[str, Any], status: int = 200
) -> JSONResponse:
    if isinstance(payload, BaseModel):
        content: Any = payload.model_dump(mode="json")
    elif isinstance(payload, Sequence):
        content = [item.model_dump(mode="json") for item in payload]
    else:
        content = payload
    return JSONResponse(content, status_code=status)


def error_response(message: str, status: int, detail: Any = None) -> JSONResponse:
    content: dict[str, Any] = {"error": message}
    if detail is not None:
        content["detail"] = detail
    return JSONResponse(content, status_code=status)
