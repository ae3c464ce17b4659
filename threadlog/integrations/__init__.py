"""threadlog as the storage of other agent frameworks: each module is one drop-in class.

- `threadlog.integrations.langgraph.ThreadlogSaver`: a LangGraph checkpointer
  (`pip install "threadlog[langgraph]"`).
- `threadlog.integrations.openai_agents.ThreadlogSession`: an OpenAI Agents SDK session
  (`pip install "threadlog[openai-agents]"`).

A module imports its framework when it is imported, so `import threadlog` never needs one.
"""

import projections  # noqa: F401  registers the refold `Store.verify` checks cached snapshots with (`register_refold`)
