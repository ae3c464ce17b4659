"""How an answer stopped (its `stop_reason`): whole, continued by the next message, refused,
or cut short, and what rows, transcripts, `show` and the viewer's pages say of it.

An answer the model refused (`stop_reason: refusal`) ends with `stop_details`, its `category`
and `explanation`; it often holds one empty text block. One the model did not end whole (the
token limit, the context window, a stop reason this release does not know) reads as a whole
answer unless it says so. Each such answer is marked after its blocks, instead of showing that
empty text: a refusal with the words the API gave, a cut-short answer with why it stopped
(`cut_short`). `WHOLE_STOPS` is the one list of the reasons that end an answer whole: a live
turn (`Turn.cut_short`, `threadlog ask`'s exit 3) reads it too.

pi's importer keeps pi's own words (`stopReason`) as they came: `stop` ends an answer whole,
`toolUse` is continued, `length`, `aborted` and `error` cut it short. So does the LangGraph
adapter with its provider's (LangChain's `response_metadata`): OpenAI's `finish_reason` `stop`
ends an answer whole, `tool_calls` and `function_call` are continued (as `tool_use`: one that
holds no call is cut short), `length` cuts it short, and so does `content_filter`. That one is
not marked refused: the provider's filter stopped the output part-way, with no `stop_details`
to say why, and the text before it is kept; the reader needs to know the answer is not whole. The OpenAI Agents SDK session keeps an
assistant message item's `status` (the Responses API's): `completed` ends it whole,
`incomplete` (the model stopped before it finished: its output token limit, a filter) and
`in_progress` (an item stored while still being written) cut it short. A source's stop reason
is kept only as text of a word's length (`source_stop_reason`).

A paused answer (`pause_turn`: a server tool's long turn, which the model goes on from when the
conversation is sent back) is continued by the message after it. One that no message follows
was never resumed, and is marked so (`paused by the server and not resumed`): that depends on
where the reading ends, so a caller says whether the message is the last one it reads
(`last`). The rule is the simplest honest one: the last message of the view as of the point
read. A replay, a transcript or a page of rows as of an offset where the paused answer is the
last message marks it, as a fork made there starts from it unresumed; read to the head, the
answer that a later message went on from is not marked. A message holding nothing but tool
calls a fork dropped is out of the fork's view (rows, transcripts and the model view leave it
out, and the fork's request ends on the paused answer): it goes on from nothing, and the fork
marks the paused answer before it, as a fork made before it does.

Only an assistant's message is an answer: a user's message carrying a stop reason (written by
hand, or by a tool that copies every field) is neither refused nor cut short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The stop reasons of an answer the model ended whole (None: an answer that gave none, as an
# import or an earlier release recorded it; `stop`: pi's and OpenAI's end of a turn;
# `completed`: an Agents SDK message item's status).
WHOLE_STOPS = frozenset({"end_turn", "stop_sequence", None, "stop", "completed"})
# Those of an answer the next message goes on from: a tool call's results, a server tool's
# paused turn (`toolUse`: pi's tool call; `tool_calls`, `function_call`: OpenAI's). Neither ends the answer, nor cuts it short; but one
# that stopped for a tool call (`CALLS`) and holds none is cut short: nothing goes on from it
# (`threadlog ask` exits 3 on it).
CONTINUED_STOPS = frozenset({"tool_use", "pause_turn", "toolUse", "tool_calls", "function_call"})
CALLS = frozenset({"tool_use", "toolUse", "tool_calls", "function_call"})
# A server tool's paused turn: continued by the message after it, cut short when none follows.
PAUSED = "pause_turn"
REFUSED = "refusal"
# What cut an answer short, in a reader's words; the stop reason follows them in parentheses.
_CUT_BY = {
    "max_tokens": "cut off at the token limit",
    "model_context_window_exceeded": "cut off by the context window",
    "length": "cut off at the token limit",  # pi's and OpenAI's max_tokens
    "content_filter": "cut off by a content filter",  # OpenAI's
    "aborted": "cut off when it was aborted",
    "error": "cut off by an error",
    "tool_use": "cut off before the tool call it stopped for",
    "toolUse": "cut off before the tool call it stopped for",
    "tool_calls": "cut off before the tool call it stopped for",
    "function_call": "cut off before the tool call it stopped for",
    "incomplete": "cut off before it was finished",  # an Agents SDK message item's status
    "in_progress": "cut off while it was still being written",  # the same
    PAUSED: "paused by the server and not resumed",
}
_UNKNOWN = "may be cut short: a stop reason this release does not know"
# Every stop reason this release knows the meaning of: a source's is kept only if it is one.
_KNOWN = frozenset({*WHOLE_STOPS, *CONTINUED_STOPS, *_CUT_BY, REFUSED}) - {None}


def source_stop_reason(value: Any) -> str | None:
    """A stop reason a source gave (a provider's `finish_reason`, an item's `status`) as an
    answer keeps it: one this release knows, in the source's own words or, where only its
    lowercase is known, that (Gemini's `MAX_TOKENS`, `max_tokens`); None for anything else
    (nothing is kept). A provider's words this release does not know (Gemini's `STOP`, Cohere's
    `COMPLETE`, `SAFETY`) would mark each of its whole answers as maybe cut short: an adapter
    speaks for many providers, where a live turn's answer comes from the API itself."""
    if not isinstance(value, str):
        return None
    text = str.__str__(value)  # a str subclass's text, read without its own __eq__, __hash__ or lower
    if text in _KNOWN:
        return text
    lower = text.lower()
    return lower if lower in _KNOWN else None


def stop_details_said(data: Mapping[str, Any]) -> str:
    """The category and explanation an answer's `stop_details` give (a refusal's), joined by
    `: `; empty when it gives neither."""
    details = data.get("stop_details")
    return ": ".join(str(details[key]) for key in ("category", "explanation") if isinstance(details, dict) and details.get(key))


def refusal(data: Mapping[str, Any]) -> str | None:
    """What a message (its event's data) said when the model refused it, `category:
    explanation` ("" when it said nothing); None for a message not refused (a user's is not)."""
    return stop_details_said(data) if _answer(data) and data.get("stop_reason") == REFUSED else None


def cut_reason(data: Mapping[str, Any], last: bool = False) -> str | None:
    """The stop reason of a message (its event's data) the model did not end whole, neither
    refused nor continued by the next message: `max_tokens`, `model_context_window_exceeded`,
    `tool_use` on an answer that holds no tool call, `pause_turn` on the `last` message read
    (none follows it), or one this release does not know. None for any other message (a
    user's too)."""
    reason = data.get("stop_reason")
    if _answer(data) and ((reason in CALLS and not _holds_call(data)) or (reason == PAUSED and last)):
        return str(reason)
    if not _answer(data) or reason in WHOLE_STOPS or reason in CONTINUED_STOPS or reason == REFUSED:
        return None
    return reason if isinstance(reason, str) else str(reason)


def cut_by(reason: str) -> str:
    """What cut an answer short, as the marker words it before its stop reason ("cut off at
    the token limit"), or that this release does not know the reason."""
    return _CUT_BY.get(reason, _UNKNOWN)


def cut_short(data: Mapping[str, Any], last: bool = False) -> str | None:
    """What a message the model did not end whole says after its blocks: what cut it short and
    its stop reason, `cut off at the token limit (max_tokens)`; None for any other message.
    `last`: no message follows it where the reading ends (`cut_reason`). The stop reason is the
    stored text: a page or a terminal escapes it."""
    reason = cut_reason(data, last)
    return None if reason is None else f"{cut_by(reason)} ({reason})"


def _answer(data: Mapping[str, Any]) -> bool:
    """Whether a message (its event's data) is the model's: only an answer has a stop reason."""
    return data.get("role") == "assistant"


def _holds_call(data: Mapping[str, Any]) -> bool:
    """Whether a message (its event's data) holds a tool call."""
    content = data.get("content")
    return isinstance(content, list) and any(isinstance(block, dict) and block.get("type") == "tool_use" for block in content)


def blank_text(block: Mapping[str, Any]) -> bool:
    """Whether `block` is text with nothing to show: a refused or cut-short answer's often is,
    and shows as its marker instead of an empty bubble."""
    return block.get("type") == "text" and not str(block.get("text", "")).strip()
