"""The text that stands for an OpenAI Agents SDK item (a Responses API input item) in the
`message.appended` event storing it: what transcripts, search, display rows and the viewer
show of the item, which the event keeps verbatim beside it.

A call the model made reads `→ name(arguments)` from the assistant and its output
`← output` from the user side. A tool the model's provider runs itself (an MCP server's tool,
the code interpreter, web and file search, image generation) gives one item holding both the
call and what it returned (or its error): its text is the call's line, then the result's.
Whatever else an item says that a reader can use is written after its kind in brackets
(`[mcp_list_tools] docs: search, fetch`); an item of a kind not known here, or one that holds
nothing readable (an encrypted compaction), is its kind alone: `[compaction]`.

An answer's `refusal` parts (the Responses API's `ResponseOutputRefusal`) are not its text:
their words are what the model said when it refused (`refused`), which the event keeps as an
Anthropic refusal's `stop_details` explanation, shown once, as the refusal's mark.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

Said = tuple[str, str]  # (role, text) of the message standing for an item


def describe(item: dict[str, Any]) -> Said:
    """(role, text) for the message that stands for an item in transcripts and search.

    Messages keep their role (system and developer ones are written as user text, marked)
    and their text; reasoning is `[reasoning] ` and its summary (as its own text it read as
    the answer); calls and outputs as the module says. An answer's refusal parts are left
    out (`refused`): one that holds nothing else has no text.
    """
    kind, role = _str(item.get("type")), _str(item.get("role"))
    if role is not None and kind in (None, "message"):
        words = refused(item)
        content = item.get("content")
        if words is not None and isinstance(content, list):
            content = [part for part in content if not _refusal_part(part)]
        text = _content_text(content)
        if role in ("user", "assistant"):
            return str(role), text or ("" if words is not None else f"[{role} message]")
        return "user", f"[{role}] {text}"
    if kind == "reasoning":
        summary = _content_text(item.get("summary")) or _content_text(item.get("content"))
        return "assistant", f"[reasoning] {summary}" if summary else "[reasoning]"
    known = _KINDS.get(kind) if isinstance(kind, str) else None
    if known is not None:
        return known(item)
    name = str(kind or "item")
    if name.endswith(("_output", "_response")):
        output = item.get("output")
        text = output if isinstance(output, str) else _content_text(output)
        return "user", f"← {text}" if text else f"[{name}]"
    return "assistant", f"[{name}]"


def refused(item: dict[str, Any]) -> str | None:
    """The words of an answer's `refusal` parts (a message item of the assistant's), one a
    line: what the model said when it refused; None for any other item (a user's message
    holding such a part is not an answer)."""
    content = item.get("content")
    if item.get("type") not in (None, "message") or item.get("role") != "assistant" or not isinstance(content, list):
        return None
    parts = [part for part in content if _refusal_part(part)]
    return "\n".join(_str(part["refusal"]) for part in parts if isinstance(part.get("refusal"), str)) if parts else None


def _refusal_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "refusal"


def _str(value: Any) -> Any:
    """A str subclass (a `class Role(str, Enum)` member) as the plain text JSON stores it; its
    own `str()` is `Role.USER`. Anything else as it is."""
    return str.__str__(value) if isinstance(value, str) else value


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts (other parts named)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(_part_text(part) for part in content if isinstance(part, dict))


def _part_text(part: dict[str, Any]) -> str:
    for key in ("text", "refusal"):
        if isinstance(part.get(key), str):
            return str(part[key])
    if part.get("type") == "input_file" and part.get("filename"):
        return f"[file {part['filename']}]"
    return f"[{str(part.get('type', 'part')).removeprefix('input_')}]"


def _shown(value: Any) -> str:
    """A field as the text shows it: a string as it is, nothing as nothing, other values as
    JSON (or, for one no JSON holds, which the store then refuses by name, as Python writes it)."""
    if isinstance(value, str) or value is None:
        return _str(value) or ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _call(name: str, arguments: Any) -> str:
    return f"→ {name}({_shown(arguments)})"


def _with_result(call: str, result: str) -> Said:
    """A call and, when the item holds it, what it returned, on the line after."""
    return "assistant", f"{call}\n← {result}" if result else call


def _error(error: Any) -> str:
    """An error field (text, or an object with a message or content) as `error: …`, or ""."""
    if not error:
        return ""
    if isinstance(error, dict):
        message = error.get("message")
        text = message if isinstance(message, str) else _content_text(error.get("content")) or _shown(error)
    else:
        text = _shown(error)
    return f"error: {text}"


def _tool_call(item: dict[str, Any]) -> Said:
    return "assistant", _call(_shown(item.get("name")), item.get("arguments", item.get("input", "")))


def _mcp_tool(item: dict[str, Any]) -> str:
    """An MCP server's tool called: `→ server.tool(arguments)`."""
    return _call(f"{_shown(item.get('server_label'))}.{_shown(item.get('name'))}", item.get("arguments"))


def _mcp_call(item: dict[str, Any]) -> Said:
    return _with_result(_mcp_tool(item), _error(item.get("error")) or _shown(item.get("output")))


def _mcp_approval_request(item: dict[str, Any]) -> Said:
    return "assistant", f"[mcp_approval_request] {_mcp_tool(item)}"


def _mcp_approval_response(item: dict[str, Any]) -> Said:
    said = "approved" if item.get("approve") is True else "not approved"
    reason = _shown(item.get("reason"))
    return "user", f"← {said}: {reason}" if reason else f"← {said}"


def _mcp_list_tools(item: dict[str, Any]) -> Said:
    tools = item.get("tools")
    names = ", ".join(_shown(tool.get("name")) for tool in tools if isinstance(tool, dict)) if isinstance(tools, list) else ""
    listed = _error(item.get("error")) or names or "no tools"
    return "assistant", f"[mcp_list_tools] {_shown(item.get('server_label'))}: {listed}"


def _failed(item: dict[str, Any]) -> str:
    """`failed` (or the status another unfinished item has) for a result the item lacks."""
    status = _shown(item.get("status"))
    return status if status and status != "completed" else ""


def _image_generation(item: dict[str, Any]) -> Said:
    call = _call("image_generation", item.get("revised_prompt"))
    if item.get("result"):
        details = ", ".join(_shown(item[key]) for key in ("output_format", "size") if item.get(key))
        return _with_result(call, f"[image {details}]" if details else "[image]")
    return _with_result(call, _error(item.get("error")) or _failed(item))


def _code_interpreter(item: dict[str, Any]) -> Said:
    outputs = item.get("outputs")
    shown = [_shown(output.get("logs")) if output.get("type") == "logs" else f"[{_shown(output.get('type'))} "
             f"{_shown(output.get('url'))}]" for output in outputs if isinstance(output, dict)] if isinstance(outputs, list) else []
    return _with_result(_call("code_interpreter", item.get("code")), "\n".join(shown) or _failed(item))


def _local_shell(item: dict[str, Any]) -> Said:
    action = item.get("action")
    command = action.get("command") if isinstance(action, dict) else None
    words = shlex.join(command) if isinstance(command, list) and all(isinstance(word, str) for word in command) else command
    return "assistant", _call("local_shell", words)


def _shell(item: dict[str, Any]) -> Said:
    action = item.get("action")
    commands = action.get("commands") if isinstance(action, dict) else None
    shown = "\n".join(map(_shown, commands)) if isinstance(commands, list) else commands
    return "assistant", _call("shell", shown)


def _shell_output(item: dict[str, Any]) -> Said:
    """Each chunk's stdout, stderr and how the commands ended (`[exit 1]`, `[timeout]`)."""
    chunks = item.get("output")
    parts: list[str] = []
    for chunk in chunks if isinstance(chunks, list) else ():
        if isinstance(chunk, dict):
            outcome = chunk.get("outcome")
            ended = outcome if isinstance(outcome, dict) else {}
            end = f"[exit {_shown(ended.get('exit_code'))}]" if ended.get("type") == "exit" else f"[{_shown(ended.get('type'))}]"
            parts.extend(text for text in (_shown(chunk.get("stdout")).rstrip("\n"), _shown(chunk.get("stderr")).rstrip("\n"), end)
                         if text and text != "[]")
    return "user", "← " + "\n".join(parts) if parts else "[shell_call_output]"


def _apply_patch(item: dict[str, Any]) -> Said:
    operation = item.get("operation")
    change = operation if isinstance(operation, dict) else {}
    call = _call("apply_patch", f"{_shown(change.get('type'))} {_shown(change.get('path'))}")
    diff = _shown(change.get("diff"))
    return "assistant", f"{call}\n{diff}" if diff else call


def _apply_patch_output(item: dict[str, Any]) -> Said:
    status, output = _shown(item.get("status")), _shown(item.get("output"))
    said = f"{status}: {output}" if status == "failed" and output else output or status
    return "user", f"← {said}" if said else "[apply_patch_call_output]"


def _web_search(item: dict[str, Any]) -> Said:
    """A search by its query (or queries), a page opened by its URL, a find by its pattern and
    page; then the sources the search gave, when the item lists them."""
    action = item.get("action")
    act = action if isinstance(action, dict) else {}
    kind = _shown(act.get("type"))
    if kind == "search":
        queries = act.get("queries")
        call = _call("web_search", act.get("query") or ("; ".join(map(_shown, queries)) if isinstance(queries, list) else ""))
    elif kind == "find_in_page":
        call = _call("web_search.find_in_page", f"{_shown(act.get('pattern'))}, {_shown(act.get('url'))}")
    else:
        call = _call(f"web_search.{kind}" if kind else "web_search", act.get("url"))
    sources = act.get("sources")
    urls = [_shown(source.get("url")) for source in sources if isinstance(source, dict)] if isinstance(sources, list) else []
    return _with_result(call, "\n".join(urls) or _failed(item))


def _file_search(item: dict[str, Any]) -> Said:
    queries, results = item.get("queries"), item.get("results")
    call = _call("file_search", "; ".join(map(_shown, queries)) if isinstance(queries, list) else queries)
    found = [f"{_shown(result.get('filename') or result.get('file_id'))}: {_shown(result.get('text'))}"
             for result in results if isinstance(result, dict)] if isinstance(results, list) else []
    return _with_result(call, "\n".join(found) or _failed(item))


def _action(action: Any) -> str:
    """A computer action as its type and its fields: `click x=10 y=20 button=left`."""
    if not isinstance(action, dict):
        return _shown(action)
    fields = " ".join(f"{key}={_shown(value)}" for key, value in action.items() if key != "type")
    return f"{_shown(action.get('type'))} {fields}".strip()


def _computer(item: dict[str, Any]) -> Said:
    actions = item.get("actions")
    done = [_action(action) for action in actions] if isinstance(actions, list) else []
    return "assistant", _call("computer", "; ".join(done) if done else _action(item.get("action")))


def _computer_output(item: dict[str, Any]) -> Said:
    """A screenshot, named by its file id or its address (not by a data: URL, the image itself)."""
    output = item.get("output")
    shot = output if isinstance(output, dict) else {}
    url = _shown(shot.get("image_url"))
    where = _shown(shot.get("file_id")) or ("" if url.startswith("data:") else url)
    return "user", f"← [screenshot {where}]" if where else "← [screenshot]"


def _tool_names(tools: Any) -> str:
    """Tools by their names (a hosted tool, which has none, by its type)."""
    if not isinstance(tools, list):
        return ""
    return ", ".join(_shown(tool.get("name") or tool.get("server_label") or tool.get("type")) for tool in tools if isinstance(tool, dict))


def _tool_search_output(item: dict[str, Any]) -> Said:
    return "user", f"← {_tool_names(item.get('tools')) or 'no tools'}"


def _additional_tools(item: dict[str, Any]) -> Said:
    return "user", f"[additional_tools] {_tool_names(item.get('tools')) or 'none'}"


def _program_output(item: dict[str, Any]) -> Said:
    result = _shown(item.get("result"))
    return "user", f"← {result}" if result else "[program_output]"


def _item_reference(item: dict[str, Any]) -> Said:
    return "assistant", f"[item_reference {_shown(item.get('id'))}]"


def _configuration_update(item: dict[str, Any]) -> Said:
    settings = " ".join(f"{key}={_shown(item[key])}" for key in ("reasoning", "text") if key in item)
    return "user", f"[configuration_update] {settings}" if settings else "[configuration_update]"


_KINDS: dict[str, Callable[[dict[str, Any]], Said]] = {
    "function_call": _tool_call,
    "custom_tool_call": _tool_call,
    "tool_search_call": lambda item: ("assistant", _call("tool_search", item.get("arguments"))),
    "tool_search_output": _tool_search_output,
    "additional_tools": _additional_tools,
    "mcp_call": _mcp_call,
    "mcp_approval_request": _mcp_approval_request,
    "mcp_approval_response": _mcp_approval_response,
    "mcp_list_tools": _mcp_list_tools,
    "image_generation_call": _image_generation,
    "code_interpreter_call": _code_interpreter,
    "local_shell_call": _local_shell,
    "shell_call": _shell,
    "shell_call_output": _shell_output,
    "apply_patch_call": _apply_patch,
    "apply_patch_call_output": _apply_patch_output,
    "web_search_call": _web_search,
    "file_search_call": _file_search,
    "computer_call": _computer,
    "computer_call_output": _computer_output,
    "program": lambda item: ("assistant", _call("program", item.get("code"))),
    "program_output": _program_output,
    "item_reference": _item_reference,
    "configuration_update": _configuration_update,
}
