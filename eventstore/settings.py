"""A thread's request settings: the Messages API parameters threadlog does not manage itself.

`thread.created` may hold `settings` (and a fork's `config.settings` may replace them key by
key): `stop_sequences`, `tool_choice`, `metadata` (the request's, e.g. `user_id`; not the
thread's metadata), `service_tier`, `output_config`, `speed`, `inference_geo`, `diagnostics`,
whatever the installed SDK's `MessageCreateParams` declares for `client.messages.create` that
the log does not already give. Every request of the thread sends them, so one the API would
refuse is refused when it is written, not on every turn after:

- a key the log or the turn gives (`MANAGED`) is refused naming where it comes from;
- a key the SDK declares only for the beta client (`client.beta.messages.create`), or sends
  as a header rather than in the body, is refused: a live turn's body could not carry it;
- any other key the SDK does not declare (a typo; `temperature` when the installed SDK has
  none) is refused as unknown;
- a value is validated strictly against the SDK's type for its key (no "1" for 1), with no
  key, at any depth, that the SDK's TypedDicts do not declare (pydantic would drop it and
  validate the rest: the API refuses it), since it is stored and sent as given.

The SDK is the source of truth: the keys come from its types, not from a copy here.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .content import block_type_name, drain, first_error
from .errors import InvalidEvent

# Where each request parameter threadlog manages comes from, as a refusal names it.
MANAGED = {
    "messages": "the thread's messages (its events)",
    "model": "the thread's `model` (a fork's `config.model`; a turn's model=)",
    "system": "the thread's `system` (a fork's `config.system`)",
    "tools": "the thread's `tools` (a fork's `config.tools`)",
    "thinking": "the thread's `thinking` (a fork's `config.thinking`)",
    "max_tokens": "each turn (run_turn(max_tokens=), threadlog ask --max-tokens)",
    "stream": "each turn (run_turn(stream=), threadlog ask --stream)",
    "cache_control": "the request's own cache breakpoints (anthropic_request(cache=...), threadlog request --no-cache)",
    "container": "the log: a request answering calls made from a code execution container names that container",
}

# Parameters the SDK's `create` takes but sends as HTTP headers, not in the body: a request
# rebuilt from the log (`check_request`) proves the body only.
_HEADERS = {"user_profile_id": "anthropic-user-profile-id", "workspace_id": "anthropic-workspace-id"}


@functools.cache
def _declared() -> tuple[dict[str, Any], frozenset[str]]:
    """The SDK's `client.messages.create` parameters with their types, and the beta client's names."""
    from anthropic.types.beta.message_create_params import MessageCreateParamsBase as Beta
    from anthropic.types.message_create_params import MessageCreateParamsBase

    return typing.get_type_hints(MessageCreateParamsBase), frozenset(typing.get_type_hints(Beta))


def setting_keys() -> list[str]:
    """The keys `settings` takes with the installed SDK, sorted."""
    return sorted(key for key in _declared()[0] if key not in MANAGED and key not in _HEADERS)


@functools.cache
def _validator(key: str) -> tuple[TypeAdapter[Any], dict[str, TypeAdapter[Any]]]:
    """The SDK's type for `key`, and for a union of TypedDicts told apart by `type` (tool_choice)
    each member's, by that `type`: pydantic's own union error names the first member's."""
    hint = _declared()[0][key]
    members = {name: TypeAdapter(member) for member in typing.get_args(hint)
               if (name := block_type_name(member)) is not None}
    return TypeAdapter(hint), members


def _check_sent(key: Any, field: str) -> str:
    """`field.key`, unless `key` is not text, or a parameter threadlog sends from elsewhere
    or as a header: then `InvalidEvent` naming it. No SDK release changes these."""
    if not isinstance(key, str):
        raise InvalidEvent(field, f"a key must be a request parameter's name, not {type(key).__name__}")
    where = f"{field}.{key}"
    if key in MANAGED:
        raise InvalidEvent(where, f"is not a setting: threadlog sends it from {MANAGED[key]}")
    if key in _HEADERS:
        raise InvalidEvent(where, f"is sent as the {_HEADERS[key]} header, not in the request body: set it on the client "
                                  "(default_headers), which sends it with every request")
    return where


def _check_key(key: Any, field: str) -> str:
    """`field.key`, unless `key` is no setting (module doc): then `InvalidEvent` naming it."""
    where = _check_sent(key, field)
    declared, beta = _declared()
    if key not in declared:
        import importlib.metadata  # only on this refusal: a cold start would pay for it

        sdk = f"anthropic {importlib.metadata.version('anthropic')}"
        if key in beta:
            raise InvalidEvent(where, f"is a parameter of the beta Messages API only ({sdk}'s client.beta.messages.create); "
                                      "live turns send client.messages.create, which does not take it")
        raise InvalidEvent(where, f"is not a Messages API parameter {sdk} knows; settings take "
                                  f"{', '.join(setting_keys())}")
    return where


def check_setting(key: Any, value: Any, field: str = "settings") -> None:
    """Raise `InvalidEvent` naming `field.key` (and the path inside it) unless `value` is a value
    the installed SDK takes for the request parameter `key` (module doc). Imports `anthropic`."""
    where = _check_key(key, field)
    adapter, members = _validator(key)
    kind = value.get("type") if isinstance(value, dict) else None
    if members and isinstance(value, dict):
        if not isinstance(kind, str) or kind not in members:  # a list or an object is no type's name (nor hashable)
            raise InvalidEvent(f"{where}.type", f"unknown {key} type {kind!r}; expected one of {', '.join(sorted(members))}")
        adapter = members[kind]
    try:
        validated = adapter.validate_python(value, strict=True)
    except ValidationError as error:
        raise first_error(error, where) from None
    drain(validated, where)
    extra = _undeclared(value, validated, where)
    if extra is not None:
        raise InvalidEvent(extra, "is not a key the SDK's type declares here; the API refuses it")


def _undeclared(given: Any, validated: Any, where: str) -> str | None:
    """The path of the first key of `given` that validation dropped (a TypedDict's undeclared
    key), or None. `validated` is what the SDK's type made of `given`, drained."""
    if isinstance(given, dict) and isinstance(validated, dict):
        for key, item in given.items():
            if key not in validated:
                return f"{where}.{key}"
            found = _undeclared(item, validated[key], f"{where}.{key}")
            if found is not None:
                return found
    elif isinstance(given, list) and isinstance(validated, list):
        for index, (item, kept) in enumerate(zip(given, validated)):
            found = _undeclared(item, kept, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def check_settings(value: Any, field: str = "settings", removing: bool = False) -> None:
    """Raise `InvalidEvent` unless `value` maps request parameters to values the SDK takes
    (`check_setting`). `removing`: a fork's, where null removes the parent's key; a thread's
    own settings take no null (leave the key out)."""
    if not isinstance(value, dict):
        raise InvalidEvent(field, f"must be an object of request parameters, e.g. {{'stop_sequences': ['END']}}, not "
                                  f"{type(value).__name__}")
    for key, item in value.items():
        if item is None:
            if removing:
                _check_key(key, field)
                continue
            raise InvalidEvent(f"{field}.{key}", "is null: leave the key out for no setting (a fork's null removes "
                                                 "its parent's)")
        check_setting(key, item, field)


def check_restored_settings(value: dict[str, Any], field: str = "settings", removing: bool = False) -> None:
    """What a restore checks of settings written by an earlier release: a key or a value the
    installed SDK does not take is kept (an SDK since may have dropped it), but never a key
    threadlog sends from elsewhere or as a header (`_check_sent`: no release wrote one, and sent,
    a crafted export's `model` or `messages` replaced the thread's own in every request), nor a
    null in a thread's own settings (no release wrote one; the request sent it as null)."""
    for key, item in value.items():
        where = _check_sent(key, field)
        if item is None and not removing:
            raise InvalidEvent(where, "is null: a thread's settings hold no null (a fork's null removes its parent's key)")
