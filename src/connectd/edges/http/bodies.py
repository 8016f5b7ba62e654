"""Request validation for the owner API: the JSON body (pydantic models, one per route), the query
parameters and pane ids. Each refusal is a 400 (413, 415) whose JSON names the problem and the field;
nothing is called before the whole request passed.

Rules (issue 4, "Owner API"; issue 11, item 6):

- A body is at most :data:`MAX_BODY_BYTES` of ``application/json`` holding one object (``{}`` when
  empty); NaN and Infinity are not JSON numbers; JSON nested deeper than :data:`MAX_DEPTH` is refused
  (400 ``bad_json``), never a 500.
- A field the route does not take is ``unknown_field``; a missing one ``missing_field``; a wrong JSON
  type ``wrong_type`` (no coercion: ``"yes"`` is not true); a blank string ``empty_field``; a string
  over :data:`MAX_STRING` characters or holding a control character ``bad_field``; a preset that is
  not one of off, observe, collaborate ``unknown_preset``; a pane that is not ``%N`` ``bad_pane``.
- Query parameters: unknown and repeated ones are refused; numbers, flags and limits are checked.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError
from starlette.requests import ClientDisconnect, Request

from connectcore.grants import Preset
from connectd.edges.http.errors import Problem

#: A pane in a path or body: ``%N`` (or the bare number, for scripts that cannot encode ``%``).
PANE_RE = re.compile(r"%?([0-9]{1,9})")

MAX_BODY_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_STRING = 4096
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

PRESET_NAMES = ", ".join(p.value for p in Preset)


def bad(error: str, message: str, **extra: Any) -> Problem:
    return Problem(400, error, message, **extra)


# --------------------------------------------------------------------------------------------------
# The body
# --------------------------------------------------------------------------------------------------


async def read_body(request: Request) -> dict[str, Any]:
    """The JSON object in the body (``{}`` when empty), at most :data:`MAX_BODY_BYTES`."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise Problem(413, "body_too_large", f"the body must be at most {MAX_BODY_BYTES} bytes of JSON")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise Problem(
                    413, "body_too_large", f"the body must be at most {MAX_BODY_BYTES} bytes of JSON"
                )
            chunks.append(chunk)
    except ClientDisconnect:
        raise bad("bad_body", "the client went away while sending the body") from None
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise Problem(
            415, "bad_content_type", f"send the body as application/json, not {media or 'no content type'!r}"
        )
    if _depth(raw) > MAX_DEPTH:
        raise bad("bad_json", f"the body nests arrays or objects deeper than {MAX_DEPTH} levels")
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise bad("bad_json", f"the body nests arrays or objects deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad("bad_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad("bad_json", f"the body must be a JSON object, not {type(body).__name__}")
    return body


def _depth(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest (outside strings), without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _type_name(value: Any) -> str:
    return (
        "null"
        if value is None
        else {bool: "boolean", int: "number", float: "number", list: "array", dict: "object", str: "string"}.get(
            type(value), type(value).__name__
        )
    )


# --- field types ------------------------------------------------------------------------------------


def _text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty_field", "must not be empty")
    if len(value) > MAX_STRING or any(not c.isprintable() for c in value):
        raise PydanticCustomError("bad_field", f"must be at most {MAX_STRING} printable characters")
    return value


def _preset(value: str) -> Preset:
    try:
        return Preset(value.strip().lower())
    except ValueError:
        raise PydanticCustomError(
            "unknown_preset", "unknown preset {shown} (expected one of {names})", {"shown": repr(value[:64]), "names": PRESET_NAMES}
        ) from None


def parse_pane(value: Any, name: str = "pane") -> str:
    """``%N`` from ``%N`` or ``N``, or a 400 ``bad_pane`` naming where it came from."""
    match = PANE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        shown = value[:64] if isinstance(value, str) else _type_name(value)
        raise bad("bad_pane", f"{name} must be a tmux pane id like %3 (in a URL path: %253), not {shown!r}", field=name)
    return f"%{int(match.group(1))}"


def _pane(value: str) -> str:
    match = PANE_RE.fullmatch(value)
    if match is None:
        raise PydanticCustomError(
            "bad_pane", "must be a tmux pane id like %3 (in a URL path: %253), not {shown}", {"shown": repr(value[:64])}
        )
    return f"%{int(match.group(1))}"


Text = Annotated[str, AfterValidator(_text)]
PresetName = Annotated[str, AfterValidator(_preset)]
PaneId = Annotated[str, AfterValidator(_pane)]


class Body(BaseModel):
    """A request body: strict JSON types, no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Empty(Body):
    """A route that takes no fields."""


class Approve(Body):
    pair: bool = False


class SetGrant(Body):
    harness: Text
    session_id: Text
    preset: PresetName


class PanePreset(Body):
    preset: PresetName


class Revoke(Body):
    principal: Text | None = None
    pane: PaneId | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Revoke:
        if (self.principal is None) == (self.pane is None):
            raise PydanticCustomError("missing_field", "give exactly one of 'principal' (a principal id) or 'pane' (%N)")
        return self


class DisconnectAll(Body):
    end_page_sessions: bool = False


class Launch(Body):
    launcher: Text
    connect: PresetName
    cwd: Text
    session: Text | None = None
    env: dict[str, str] = Field(default_factory=dict)
    control: bool = False  # start the control role (act + Collaborate under its charter, at most one)


class LaunchHere(Launch):
    """``connectd launch --here``: the supervisor in ``pane`` (its own pid) asks for the plan."""

    pane: PaneId
    pid: int


class HereNext(Body):
    """The supervisor's agent exited: is a relaunch in place (restart-to-connect) under way?"""

    pane: PaneId
    pid: int


class HereStarted(Body):
    """The supervisor started the agent as its child (held before exec until the daemon answers)."""

    pane: PaneId
    pid: int
    child: int


class Restart(Body):
    pane: PaneId
    preset: PresetName


ModelT = TypeVar("ModelT", bound=Body)

_WRONG_TYPE = {
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "an object of strings",
    "int_type": "a whole number",
    "float_type": "a number",
    "list_type": "an array",
    "none_required": "null",
}


async def parse_body(request: Request, model: type[ModelT]) -> ModelT:
    """The body as ``model``, or a 400 naming the first problem and its field."""
    body = await read_body(request)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)  # an unknown field is named first, as the body is wrong
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        raise _problem(first, model) from None


def _field_name(loc: tuple[Any, ...]) -> str:
    head, *rest = loc or ("",)
    return str(head) + "".join(f"[{part!r}]" for part in rest)


def _problem(error: Mapping[str, Any], model: type[Body]) -> Problem:
    kind, loc = str(error["type"]), tuple(error.get("loc", ()))
    name = _field_name(loc)
    fields = ", ".join(sorted(model.model_fields)) or "none"
    if kind == "missing":
        hint = f" (one of {PRESET_NAMES})" if name in ("preset", "connect") else ""
        return bad("missing_field", f"missing field {name!r}{hint}", field=name)
    if kind == "extra_forbidden":
        return bad("unknown_field", f"unknown field {name!r} (expected: {fields})", field=name)
    if kind in _WRONG_TYPE or kind.endswith("_type"):
        wanted = _WRONG_TYPE.get(kind, kind.removesuffix("_type"))
        if name in ("preset", "connect"):
            wanted = f"one of {PRESET_NAMES}"
        return bad("wrong_type", f"field {name!r} must be {wanted}, not {_type_name(error.get('input'))}", field=name)
    message = str(error.get("msg", kind))
    if not loc:  # a rule over the whole body
        return bad(kind, message)
    return bad(kind, f"field {name!r} {message}", field=name)


# --------------------------------------------------------------------------------------------------
# Query parameters
# --------------------------------------------------------------------------------------------------


class Query:
    """Query parameters, checked: unknown ones and repeated ones are refused."""

    def __init__(self, request: Request, allowed: set[str]) -> None:
        params = request.query_params
        unknown = sorted(set(params.keys()) - allowed)
        if unknown:
            raise bad(
                "unknown_parameter",
                f"unknown query parameter {unknown[0]!r} (expected: {', '.join(sorted(allowed)) or 'none'})",
            )
        for key in params:
            if len(params.getlist(key)) > 1:
                raise bad("repeated_parameter", f"query parameter {key!r} given more than once")
        self.params = params

    def text(self, name: str) -> str | None:
        value = self.params.get(name)
        if value is None or value == "":
            return None
        if len(value) > MAX_STRING or any(not c.isprintable() for c in value):
            raise bad(
                "bad_parameter", f"query parameter {name!r} must be at most {MAX_STRING} printable characters"
            )
        return value

    def flag(self, name: str) -> bool:
        value = self.params.get(name)
        if value is None:
            return False
        lowered = value.lower()
        if lowered in {"1", "true", "yes", ""}:
            return True
        if lowered in {"0", "false", "no"}:
            return False
        raise bad("bad_parameter", f"query parameter {name!r} must be 1 or 0, not {value[:64]!r}")

    def number(self, name: str) -> float | None:
        value = self.params.get(name)
        if value is None or value == "":
            return None
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise bad(
                "bad_parameter",
                f"query parameter {name!r} must be a number (seconds since the epoch), not {value[:64]!r}",
            )
        return number

    def integer(
        self, name: str, *, default: int | None = None, low: int = 0, high: int | None = None
    ) -> int | None:
        value = self.params.get(name)
        if value is None or value == "":
            return default
        if (
            not re.fullmatch(r"[0-9]{1,12}", value)
            or int(value) < low
            or (high is not None and int(value) > high)
        ):
            bounds = f"from {low}" + (f" to {high}" if high is not None else "")
            raise bad(
                "bad_parameter",
                f"query parameter {name!r} must be a whole number {bounds}, not {value[:64]!r}",
            )
        return int(value)

    def limit(self) -> int:
        value = self.integer("limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        assert value is not None
        return value

