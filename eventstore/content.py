"""Message content blocks, validated against the anthropic SDK's own `*BlockParam` types.

The SDK describes request blocks as TypedDicts. We dispatch on a block's `type` to the SDK
type for it (the stable types first, then beta-only ones such as `compaction`), so an
unknown type is named as such instead of drowning in one error per union member.

Fast path: the stable types' pydantic-core schemas are generated from the SDK into
`content_schemas.py` (see content_schema.py), and a block of one of those types is checked by
a `SchemaValidator` built from it, the validator pydantic would build from the TypedDict, at
a fraction of the cost and without importing `anthropic`. Any other type (beta-only ones) and
the list of known types in an error still go through the SDK.

Gotcha: the SDK's TypedDicts declare lists as `Iterable[...]`, which pydantic validates
lazily — it returns a `ValidatorIterator` and only checks items when someone iterates it.
A bad nested block (a tool_result's content, a citation) would then pass at append time and
fail much later. `drain` walks the validated value and consumes every such iterator, so
validation is eager. The stored block is the caller's JSON, not pydantic's output, because
TypedDict validation drops keys the SDK does not know yet (for example `caller`).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Collection, Iterator
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import SchemaValidator
from typing_extensions import is_typeddict

from .errors import InvalidEvent, key_not_text, path_key


def block_type_name(typed_dict: Any) -> str | None:
    """The `type` literal a block TypedDict declares, or None for anything else."""
    try:
        hints = typing.get_type_hints(typed_dict, include_extras=True)
    except TypeError:  # not a TypedDict (the beta union also lists response models)
        return None
    literal = hints.get("type")
    while literal is not None and typing.get_origin(literal) is not typing.Literal:
        args = typing.get_args(literal)
        literal = args[0] if args else None
    return typing.get_args(literal)[0] if literal is not None else None


@functools.cache
def generated_validator(kind: str) -> SchemaValidator | None:
    """The validator for a stable block type, from its generated schema; None for others, and
    for every type when the installed SDK or pydantic is not the release the schemas were
    generated from (the SDK's own types then decide: they are the source of truth)."""
    schema = _generated_schemas().get(kind)
    return SchemaValidator(_objects_apart(schema)) if schema is not None else None


@functools.cache
def _generated_schemas() -> dict[str, Any]:
    import importlib.metadata  # here, not at the top: it costs a CLI's cold start ~15 ms

    try:  # read from the installed metadata: importing `anthropic` is what this avoids
        from . import content_schemas

        if (importlib.metadata.version("anthropic"), importlib.metadata.version("pydantic")) != (
            content_schemas.SDK_VERSION, content_schemas.PYDANTIC_VERSION
        ):
            return {}
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return {}
    return content_schemas.SCHEMAS


@functools.cache
def _sdk_types() -> dict[str, Any]:
    """Every block TypedDict of the SDK, by its `type` (stable ones win over beta ones)."""
    from anthropic.types import ContentBlockParam
    from anthropic.types.beta import BetaContentBlockParam

    types: dict[str, Any] = {}
    for union in (ContentBlockParam, BetaContentBlockParam):
        for member in typing.get_args(union):
            name = block_type_name(member) if is_typeddict(member) else None
            if name and name not in types:
                types[name] = member
    return types


@functools.cache
def sdk_validator(kind: str) -> SchemaValidator | None:
    """The SDK's validator for a block type (imports `anthropic`); None for an unknown type."""
    member = _sdk_types().get(kind)
    return SchemaValidator(_objects_apart(TypeAdapter(member).core_schema)) if member is not None else None


def _objects_apart(schema: Any) -> Any:
    """A copy of a core schema whose unions of a list and an object take a JSON object as the
    object: the SDK's `Iterable[...]` is a lazy `generator`, which takes any iterable, a dict
    too (its keys), and a union picks it first, so a web search's error result (`content`:
    `{"type": "web_search_tool_result_error", ...}`, not a list of results) was refused as a
    list of keys. In such a union the list is a `list`, which takes no dict."""
    if isinstance(schema, list | tuple):
        return type(schema)(_objects_apart(item) for item in schema)
    if not isinstance(schema, dict):
        return schema
    copied = {key: _objects_apart(item) for key, item in schema.items()}
    if copied.get("type") == "union" and any(_kind(choice) in _OBJECTS for choice in copied["choices"]):
        copied["choices"] = [_listed(choice) for choice in copied["choices"]]
    return copied


# The core schema types a JSON object validates as.
_OBJECTS = frozenset(("typed-dict", "model", "dataclass", "dict", "definition-ref"))


def _kind(choice: Any) -> Any:
    """A union choice's schema type (a choice may be a `(schema, label)` pair)."""
    return (choice[0] if isinstance(choice, tuple) else choice).get("type")


def _listed(choice: Any) -> Any:
    if isinstance(choice, tuple):
        return (_listed(choice[0]), *choice[1:])
    return {**choice, "type": "list"} if choice.get("type") == "generator" else choice


def known_block_type(kind: Any, in_tool_result: bool = False) -> bool:
    """Whether `kind` is a content block `type` the SDK knows, in a message or (`in_tool_result`)
    also as one a tool result's content takes only there (`tool_reference`); imports
    `anthropic` only for a type not among the stable ones."""
    if not isinstance(kind, str):
        return False
    return (generated_validator(kind) or sdk_validator(kind)) is not None or (in_tool_result and kind in _result_types())


@functools.cache
def _result_types() -> frozenset[str]:
    """The block types the SDK's tool results (stable and beta) take in their content."""
    from anthropic.types import ToolResultBlockParam
    from anthropic.types.beta import BetaToolResultBlockParam

    names: set[str] = set()
    hints = [typing.get_type_hints(result)["content"] for result in (ToolResultBlockParam, BetaToolResultBlockParam)]
    while hints:  # Union[str, Iterable[Union[TextBlockParam, ...]]], walked down to its TypedDicts
        hint = hints.pop()
        if is_typeddict(hint):
            name = block_type_name(hint)
            if name:
                names.add(name)
        else:
            hints.extend(typing.get_args(hint))
    return frozenset(names)


@functools.cache
def image_media_types() -> frozenset[str]:
    """The `media_type`s an image's base64 source takes (the SDK's `Base64ImageSourceParam`),
    read from the generated schema when it is the installed SDK's: importing `anthropic` takes
    over a second (the web viewer's first page showing an image waited on it)."""
    for source in _generated_schemas().get("image", {}).get("fields", {}).get("source", {}).get("schema", {}).get("choices", []):
        if source.get("config", {}).get("title") == "Base64ImageSourceParam":
            return frozenset(source["fields"]["media_type"]["schema"]["expected"])
    from anthropic.types import Base64ImageSourceParam

    hint = typing.get_type_hints(Base64ImageSourceParam, include_extras=True)["media_type"]
    while typing.get_origin(hint) is not typing.Literal:  # Required[Literal[...]]
        hint = typing.get_args(hint)[0]
    return frozenset(typing.get_args(hint))


def block_types() -> list[str]:
    """Every content block `type` threadlog accepts, sorted."""
    return sorted(_sdk_types())


def drain(value: Any, path: str) -> None:
    """Consume every lazy `ValidatorIterator` inside a validated value (see module doc).

    Errors found while draining are raised as `InvalidEvent` naming the full path.
    """
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in list(items):
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
        if isinstance(item, Iterator):
            try:
                item = list(item)
            except ValidationError as error:
                raise first_error(error, where) from None
            value[key] = item
        drain(item, where)


def first_error(error: ValidationError, field: str) -> InvalidEvent:
    """The first error, its path without the union member names pydantic puts in it; a key that
    is not text names the object holding it (pydantic's path goes on to the key). A value that
    is one of some known names or any text (a model: `Literal[...] | str`) and is neither is
    said to be no text: listing every known name read as if only those were allowed."""
    errors = error.errors()
    first = errors[0]
    at = first["loc"]
    branch = next((i for i, part in enumerate(at) if isinstance(part, str) and part.startswith("literal[")), None)
    if branch is not None:
        text = next((e for e in errors if e["loc"][:branch] == at[:branch] and e["loc"][branch:branch + 1] == ("str",)), None)
        if text is not None:
            first = {**text, "loc": (*at[:branch], *text["loc"][branch + 1:])}
    parts = [part for part in first["loc"] if not (isinstance(part, str) and part.endswith("Param"))]
    keyed = first["type"] == "invalid_key" or (parts[-1:] == ["[key]"] and first["type"] == "string_type")
    if keyed:
        del parts[-1 if first["type"] == "invalid_key" else -2:]
    loc = "".join(f"[{part}]" if isinstance(part, int) else f".{path_key(str(part))}" for part in parts)
    return key_not_text(f"{field}{loc}", first["input"]) if keyed else InvalidEvent(f"{field}{loc}", first["msg"])


def validate_block(block: Any, field: str, strict: bool = True) -> None:
    """Raise `InvalidEvent` naming `field` (and the path inside it) unless `block` is valid.

    Strictly typed: the stored block is the caller's JSON, so a value pydantic would only
    coerce (`"is_error": "false"`, `"start_char_index": "5"`, 1.0 for a count) would be
    stored, and sent, as it came, and the API refuses it. `strict=False` is for events read
    back from an export, which older releases checked laxly: what they stored restores."""
    if not isinstance(block, dict):
        raise InvalidEvent(field, f"a content block must be an object, not {type(block).__name__}")
    kind = block.get("type")
    validator = (generated_validator(kind) or sdk_validator(kind)) if isinstance(kind, str) else None
    if validator is None:
        raise InvalidEvent(
            f"{field}.type",
            f"unknown content block type {kind!r}; expected one of {', '.join(block_types())}",
        )
    validate_with(validator, block, field, strict)


def validate_with(validator: SchemaValidator | TypeAdapter[Any], block: dict[str, Any], field: str,
                  strict: bool = True) -> None:
    """Validate `block` eagerly with one validator (generated or the SDK's), or raise `InvalidEvent`."""
    try:
        validated = validator.validate_python(block, strict=strict)
    except ValidationError as error:
        raise first_error(error, field) from None
    drain(validated, field)


@functools.cache
def _thinking_types() -> dict[str, tuple[TypeAdapter[Any], frozenset[str]]]:
    """The SDK's thinking configurations (`ThinkingConfigParam`'s members) by their `type`: a
    validator and the keys the member declares."""
    from anthropic.types import ThinkingConfigParam

    return {name: (TypeAdapter(member), frozenset(typing.get_type_hints(member)))
            for member in typing.get_args(ThinkingConfigParam) if (name := block_type_name(member)) is not None}


# The least budget the SDK's ThinkingConfigEnabledParam allows ("Must be ≥1024").
MIN_THINKING_BUDGET = 1024


def validate_thinking(value: Any, field: str) -> None:
    """Raise `InvalidEvent` naming `field` unless `value` is a Messages API `thinking`
    parameter the SDK knows (e.g. `{"type": "enabled", "budget_tokens": 2048}`), exactly:
    strictly typed (no "2048", 2048.0 or true for a number), no key its type does not
    declare, a budget of at least 1,024 tokens. The value is stored and sent as given, so
    nothing is coerced. Imports `anthropic`: a thread's configuration is validated once,
    when the thread is created."""
    if not isinstance(value, dict):
        raise InvalidEvent(field, f"must be an object such as {{'type': 'enabled', 'budget_tokens': 2048}}, not {type(value).__name__}")
    kind = value.get("type")
    known = _thinking_types().get(kind) if isinstance(kind, str) else None
    if known is None:
        raise InvalidEvent(f"{field}.type", f"unknown thinking type {kind!r}; expected one of {', '.join(sorted(_thinking_types()))}")
    validator, keys = known
    extra = sorted(str(key) for key in value if key not in keys)
    if extra:
        raise InvalidEvent(f"{field}.{extra[0]}", f"thinking of type {kind!r} takes only {', '.join(sorted(keys))}")
    try:
        validator.validate_python(value, strict=True)
    except ValidationError as error:
        raise first_error(error, field) from None
    budget = value.get("budget_tokens")
    if budget is not None and budget < MIN_THINKING_BUDGET:
        raise InvalidEvent(f"{field}.budget_tokens", f"must be at least {MIN_THINKING_BUDGET:,} (the API's least), not {budget}")


@functools.cache
def _tool_types() -> dict[str, Any]:
    """Every tool definition TypedDict of the SDK, by its `type` (stable ones win over beta
    ones, as for blocks); `custom` is the plain tool (`name`, `input_schema`), whose `type`
    may be left out. A type the SDK spells two ways (`tool_search_tool_regex_20251119` and its
    undated `tool_search_tool_regex`) is known by both."""
    from anthropic.types import ToolUnionParam
    from anthropic.types.beta import BetaToolUnionParam

    types: dict[str, Any] = {}
    for union in (ToolUnionParam, BetaToolUnionParam):
        for member in typing.get_args(union):
            for name in _type_literals(member) if is_typeddict(member) else ():
                types.setdefault(name, member)
    return types


def _type_literals(typed_dict: Any) -> tuple[str, ...]:
    """Every value the `type` literal of a TypedDict allows (`block_type_name` is the first)."""
    literal = typing.get_type_hints(typed_dict, include_extras=True).get("type")
    while literal is not None and typing.get_origin(literal) is not typing.Literal:
        args = typing.get_args(literal)
        literal = args[0] if args else None
    return typing.get_args(literal) if literal is not None else ()


@functools.cache
def _tool_validator(kind: str) -> TypeAdapter[Any]:
    return TypeAdapter(_tool_types()[kind])


def validate_tools(value: list[Any], field: str) -> None:
    """Raise `InvalidEvent` naming `field[i]` (and the path inside it) unless every item is a
    tool definition the SDK knows, strictly typed, as `validate_block` checks a block: a
    thread's tools go into every request of it and of its forks, so one the API refuses is
    refused when the thread is made, not on every request after. Imports `anthropic`."""
    for index, tool in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(tool, dict):
            raise InvalidEvent(where, f"a tool definition must be an object, not {type(tool).__name__}")
        kind = tool.get("type")
        kind = "custom" if kind is None else kind
        if not isinstance(kind, str) or kind not in _tool_types():
            raise InvalidEvent(f"{where}.type", f"unknown tool type {kind!r}; expected one of {', '.join(sorted(_tool_types()))}")
        validate_with(_tool_validator(kind), tool, where)


def validate_system(value: list[Any], field: str) -> None:
    """Raise `InvalidEvent` naming `field[i]` unless every item is a text block: a system
    prompt given as blocks is a list of them (the API takes no other kind there)."""
    for index, block in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise InvalidEvent(f"{where}.type" if isinstance(block, dict) else where,
                               f"a system prompt block must be a text block ({{'type': 'text', 'text': ...}}), not {kind!r}")
        validate_block(block, where)


def normalize_content(content: Any, field: str = "content", strict: bool = True) -> list[dict[str, Any]]:
    """A plain string becomes one text block; a list is validated block by block (`strict`:
    see `validate_block`)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise InvalidEvent(field, "must be a non-empty string or a non-empty list of content blocks")
    for index, block in enumerate(content):
        validate_block(block, f"{field}[{index}]", strict)
    return content


def without_dropped(content: list[dict[str, Any]], ids: Collection[str]) -> list[dict[str, Any]]:
    """`content` less its tool_use blocks with these ids (the calls a fork dropped)."""
    return [b for b in content if not (b.get("type") == "tool_use" and b.get("id") in ids)]


# The thinking blocks: a request leaves out an answer holding nothing else (the API refuses one).
THINKING_BLOCKS = frozenset(("thinking", "redacted_thinking"))


def unsent(block: dict[str, Any]) -> bool:
    """Whether a model request leaves `block` out wherever it stands: a blank text (empty, all
    whitespace, or no text), or a thinking block without a signature (the API checks every
    one's; pi keeps another provider's thinking so)."""
    kind = block.get("type")
    if kind == "thinking":
        signature = block.get("signature")
        return not signature or not isinstance(signature, str)
    if kind != "text":
        return False
    text = block.get("text")
    # Only a text that starts with whitespace can be all whitespace: strip() copies the text.
    return not text or not isinstance(text, str) or (text[0].isspace() and not text.strip())


def tool_use_ids(content: list[dict[str, Any]]) -> list[str]:
    """The ids of the client-side `tool_use` blocks in a message, in order."""
    return [block["id"] for block in content if block.get("type") == "tool_use"]


def tool_result_ids(content: list[dict[str, Any]]) -> list[str]:
    """The `tool_use_id`s answered by the `tool_result` blocks in a message, in order."""
    return [block["tool_use_id"] for block in content if block.get("type") == "tool_result"]
