"""A process using a `ThreadlogSession`, for tests/test_openai_agents.py: `python tests/agents_worker.py MODE DB SESSION ...`.

- `turn DB SESSION TEXT REPLY`: one `Runner` turn with a scripted model answering REPLY;
  prints the input the model was given (JSON), which is the session's history plus TEXT.
- `add DB SESSION WRITER COUNT`: prints `ready`, waits for a line on stdin, then makes
  COUNT `add_items` calls of one user message each, `WRITER-0`, `WRITER-1`, …; prints `done`.
- `mix DB SESSION WRITER COUNT SEED CLEARS`: prints `ready`, waits for a line, then makes COUNT
  calls chosen by SEED: `add_items` of 1-3 user messages `WRITER-i-k`, `pop_item`, and with
  CLEARS=1 now and then `clear_session`; prints what it did (JSON), waits for a line and
  prints what the same session object's `get_items` gives then (JSON).
- `items DB SESSION`: prints the session's items (JSON), as a new process reads them.
"""

from __future__ import annotations

import asyncio
import json
import random
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


async def mix(session: ThreadlogSession, writer: str, count: int, seed: int, clears: bool) -> None:
    print("ready", flush=True)
    sys.stdin.readline()
    rnd, done = random.Random(seed), []
    for i in range(count):
        roll = rnd.random()
        if roll < 0.6:
            items = [{"role": "user", "content": f"{writer}-{i}-{k}"} for k in range(rnd.randint(1, 3))]
            await session.add_items(items)  # type: ignore[arg-type]
            done.append(["add", [item["content"] for item in items]])
        elif roll < 0.95 or not clears:
            popped = await session.pop_item()
            done.append(["pop", popped and popped["content"]])  # type: ignore[index]
        else:
            await session.clear_session()
            done.append(["clear", None])
    print(json.dumps(done), flush=True)
    sys.stdin.readline()  # the parent reads every view once every writer is done
    print(json.dumps([item["content"] for item in await session.get_items()]), flush=True)  # type: ignore[index]


def main() -> None:
    set_tracing_disabled(True)
    mode, db, session_id, *args = sys.argv[1:]
    with Store(db) as store:
        session = ThreadlogSession(session_id, store)
        if mode == "turn":
            asyncio.run(turn(session, args[0], args[1]))
        elif mode == "add":
            asyncio.run(add(session, args[0], int(args[1])))
        elif mode == "mix":
            asyncio.run(mix(session, args[0], int(args[1]), int(args[2]), args[3] == "1"))
        elif mode == "items":
            print(json.dumps(asyncio.run(session.get_items())), flush=True)
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
