"""threadlog as the storage of other agent frameworks: each module is one drop-in class.

`threadlog.integrations.langgraph.ThreadlogSaver` is a LangGraph checkpointer
(`pip install "threadlog[langgraph]"`). A module imports its framework when it is imported,
so `import threadlog` never needs one.
"""
