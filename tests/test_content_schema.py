"""The generated content validators: the SDK's types stay the source of truth.

- regenerating from the installed SDK gives exactly the checked-in `content_schemas.py`;
- for generated blocks, valid and broken, the generated validator accepts and refuses exactly
  what the SDK's TypedDict validation does, with the same errors at the same paths;
- a block type without a generated validator still goes through the SDK;
- a cold process validating the common blocks never imports `anthropic`.

With another SDK or pydantic release installed than the one `content_schemas.py` names (one
published since it was generated), the store validates through the SDK: the checks then hold
schemas rendered from that release to the same verdicts, and that fallback to the SDK's types.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import SchemaValidator

from eventstore import content, content_schema, content_schemas
from eventstore.errors import InvalidEvent

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"]


# Whether the installed SDK and pydantic are the releases `content_schemas.py` was generated
# from. Only then does `content` use the checked-in schemas; with another release installed (a
# new SDK out since the file was generated) it validates through the SDK, and these tests check
# the generator against that release instead: schemas rendered from it, in this process.
CHECKED_IN = (importlib.metadata.version("anthropic"), importlib.metadata.version("pydantic")) == (
    content_schemas.SDK_VERSION, content_schemas.PYDANTIC_VERSION)


@functools.cache
def _rendered() -> dict[str, Any]:
    """The schemas `python -m eventstore.content_schema` would write for the installed SDK."""
    namespace: dict[str, Any] = {}
    exec(compile(content_schema.render(), "<rendered content_schemas>", "exec"), namespace)
    return namespace["SCHEMAS"]  # type: ignore[no-any-return]


def _generated(kind: str) -> SchemaValidator | None:
    """The generated validator for `kind`: the store's own, or one from freshly rendered schemas."""
    if CHECKED_IN:
        return content.generated_validator(kind)
    schema = _rendered().get(kind)
    return SchemaValidator(schema) if schema is not None else None


def test_checked_in_schemas_match_the_installed_sdk() -> None:
    if CHECKED_IN:
        assert content_schema.TARGET.read_text() == content_schema.render(), (
            "eventstore/content_schemas.py is stale: run `python -m eventstore.content_schema`"
        )
    else:  # another release: the generator still renders it, and the store uses the SDK's types
        assert set(COMMON) <= set(_rendered())
        assert all(content.generated_validator(kind) is None for kind in COMMON)


def test_the_common_block_types_have_generated_validators() -> None:
    from eventstore.content_schemas import SCHEMAS

    assert set(COMMON) <= set(SCHEMAS)


# --- blocks, valid and broken ---------------------------------------------------------------

words = st.text(alphabet="abc xyz", max_size=8)
cache_control = st.one_of(st.none(), st.fixed_dictionaries({"type": st.just("ephemeral")},
                                                            optional={"ttl": st.sampled_from(["5m", "1h"])}))
citation = st.one_of(
    st.fixed_dictionaries({"type": st.just("char_location"), "cited_text": words, "document_index": st.integers(0, 3),
                           "document_title": st.one_of(st.none(), words), "start_char_index": st.integers(0, 9),
                           "end_char_index": st.integers(0, 9)}),
    st.fixed_dictionaries({"type": st.just("page_location"), "cited_text": words, "document_index": st.integers(0, 3),
                           "document_title": st.one_of(st.none(), words), "start_page_number": st.integers(1, 9),
                           "end_page_number": st.integers(1, 9)}),
)
text_block = st.fixed_dictionaries({"type": st.just("text"), "text": words},
                                   optional={"cache_control": cache_control, "citations": st.lists(citation, max_size=2)})
image_block = st.fixed_dictionaries(
    {"type": st.just("image"), "source": st.one_of(
        st.fixed_dictionaries({"type": st.just("base64"), "media_type": st.sampled_from(["image/png", "image/gif"]),
                               "data": words}),
        st.fixed_dictionaries({"type": st.just("url"), "url": words}))},
    optional={"cache_control": cache_control})
document_block = st.fixed_dictionaries(
    {"type": st.just("document"), "source": st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "media_type": st.just("text/plain"), "data": words}),
        st.fixed_dictionaries({"type": st.just("url"), "url": words}),
        st.fixed_dictionaries({"type": st.just("content"), "content": st.one_of(words, st.lists(text_block, max_size=2))}))},
    optional={"title": st.one_of(st.none(), words), "context": st.one_of(st.none(), words),
              "citations": st.fixed_dictionaries({}, optional={"enabled": st.booleans()}),
              "cache_control": cache_control})
json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), words),
                           lambda inner: st.lists(inner, max_size=2) | st.dictionaries(words, inner, max_size=2),
                           max_leaves=4)
tool_use_block = st.fixed_dictionaries(
    {"type": st.just("tool_use"), "id": words, "name": words, "input": st.dictionaries(words, json_values, max_size=3)},
    optional={"cache_control": cache_control})
tool_result_block = st.fixed_dictionaries(
    {"type": st.just("tool_result"), "tool_use_id": words},
    optional={"content": st.one_of(words, st.lists(st.one_of(text_block, image_block), max_size=3)),
              "is_error": st.booleans(), "cache_control": cache_control})
thinking_block = st.fixed_dictionaries({"type": st.just("thinking"), "thinking": words, "signature": words})
redacted_block = st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": words})
valid_blocks = st.one_of(text_block, image_block, document_block, tool_use_block, tool_result_block,
                         thinking_block, redacted_block)
wrong_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.just(1.5), words, st.just([]),
                         st.just({}), st.just([1, "x"]), st.just({"type": "text"}), st.just({"type": "bogus"}))


def _containers(value: Any, found: list[Any]) -> list[Any]:
    if isinstance(value, dict | list):
        found.append(value)
        for item in value.values() if isinstance(value, dict) else value:
            _containers(item, found)
    return found


@st.composite
def broken_blocks(draw: st.DrawFn) -> dict[str, Any]:
    """A valid block with one change somewhere inside: a key dropped, added or given a wrong value."""
    block: dict[str, Any] = copy.deepcopy(draw(valid_blocks))
    target = draw(st.sampled_from(_containers(block, [])))
    action = draw(st.sampled_from(["drop", "add", "wrong"]))
    if isinstance(target, dict):
        keys = list(target)
        if action == "add" or not keys:
            target[draw(st.sampled_from(["extra", "type", "text", "citations", "cache_control"]))] = draw(wrong_values)
        elif action == "drop":
            del target[draw(st.sampled_from(keys))]
        else:
            target[draw(st.sampled_from(keys))] = draw(wrong_values)
    elif target and action != "add":
        index = draw(st.integers(0, len(target) - 1))
        if action == "drop":
            del target[index]
        else:
            target[index] = draw(wrong_values)
    else:
        target.append(draw(wrong_values))
    return block


def _outcome(validator: Any, block: dict[str, Any]) -> Any:
    """What a validator says about a block: the raw errors pydantic reports, then threadlog's refusal."""
    try:
        validator.validate_python(copy.deepcopy(block))
        raw = None
    except ValidationError as error:
        raw = error.errors(include_url=False)
    try:
        content.validate_with(validator, copy.deepcopy(block), "content[0]")
        said = None
    except InvalidEvent as error:
        said = str(error)
    return raw, said


def _same_as_sdk(block: dict[str, Any]) -> None:
    kind = block["type"]
    fast, sdk = _generated(kind), content.sdk_validator(kind)
    assert fast is not None and sdk is not None
    assert _outcome(fast, block) == _outcome(sdk, block)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_blocks)
def test_generated_validators_accept_what_the_sdk_accepts(block: dict[str, Any]) -> None:
    _same_as_sdk(block)
    content.validate_block(block, "content[0]")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_blocks())
def test_generated_validators_refuse_what_the_sdk_refuses_at_the_same_path(block: dict[str, Any]) -> None:
    if not isinstance(block.get("type"), str) or _generated(block["type"]) is None:
        return  # the mutation hit `type` itself: dispatch, not validation, answers that
    _same_as_sdk(block)


def test_a_lazy_nested_list_is_checked_eagerly_by_both() -> None:
    block = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": 3}]}
    for validator in (_generated("tool_result"), content.sdk_validator("tool_result")):
        assert validator is not None
        with pytest.raises(InvalidEvent, match=r"content\[0\]\.content\[0\]"):
            content.validate_with(validator, block, "content[0]")


def test_a_type_without_a_generated_validator_goes_through_the_sdk() -> None:
    assert content.generated_validator("compaction") is None
    content.validate_block({"type": "compaction", "content": "summary"}, "content[0]")
    with pytest.raises(InvalidEvent, match=r"content\[0\]\.content"):
        content.validate_block({"type": "compaction", "content": 7}, "content[0]")


def test_validating_the_common_blocks_does_not_import_the_sdk() -> None:
    blocks = [
        {"type": "text", "text": "hi", "citations": [{"type": "char_location", "cited_text": "h", "document_index": 0,
                                                       "document_title": None, "start_char_index": 0, "end_char_index": 1}]},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}},
        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"}], "is_error": False},
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "redacted_thinking", "data": "x"},
    ]
    script = (
        "import sys\nfrom eventstore.content import normalize_content\n"
        f"normalize_content({blocks!r})\n"
        "print('anthropic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # With another SDK release installed than the schemas name, the SDK's own types decide.
    assert done.stdout.strip() == ("False" if CHECKED_IN else "True")


def test_another_sdk_release_falls_back_to_the_sdks_own_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated schemas stand for one SDK release; with any other installed, the SDK decides."""
    from eventstore import content, content_schemas

    monkeypatch.setattr(content_schemas, "SDK_VERSION", "0.0.0")
    content._generated_schemas.cache_clear()
    content.generated_validator.cache_clear()
    try:
        assert content.generated_validator("text") is None
        content.validate_block({"type": "text", "text": "still checked"}, "block")
        with pytest.raises(InvalidEvent, match=r"block\.text"):
            content.validate_block({"type": "text", "text": 3}, "block")
    finally:
        content._generated_schemas.cache_clear()
        content.generated_validator.cache_clear()
