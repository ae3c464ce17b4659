"""A process using a `ThreadlogSession`, for tests/test_openai_agents.py: `python tests/agents_worker.py MODE DB SESSION ...`.

- `turn DB SESSION TEXT REPLY`: one `Runner` turn with a scripted model answering REPLY;
  prints the input the model was given (JSON), which is the session's history plus TEXT.
- `add DB SESSION WRITER COUNT`: prints `ready`, waits for a line on stdin, then makes
  COUNT `add_items` calls of one user message each, `WRITER-0`, `WRITER-1`, …; prints `done`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.testing import ScriptedModel, assistant_message  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.openai_agents import ThreadlogSession  # noqa: E402


async def turn(session: ThreadlogSession, text: str, reply: str) -> None:
    model = ScriptedModel([[assistant_message(reply)]])
    result = await Runner.run(Agent(name="worker", model=model), text, session=session)
    assert result.final_output == reply
    assert model.first_call is not None
    print(json.dumps(model.first_call.input), flush=True)


async def add(session: ThreadlogSession, writer: str, count: int) -> None:
    print("ready", flush=True)
    sys.stdin.readline()  # the parent starts every writer at once, past their slow imports
    for i in range(count):
        await session.add_items([{"role": "user", "content": f"{writer}-{i}"}])
    print("done", flush=True)


def main() -> None:
    set_tracing_disabled(True)
    mode, db, session_id, *args = sys.argv[1:]
    with Store(db) as store:
        session = ThreadlogSession(session_id, store)
        if mode == "turn":
            asyncio.run(turn(session, args[0], args[1]))
        elif mode == "add":
            asyncio.run(add(session, args[0], int(args[1])))
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
