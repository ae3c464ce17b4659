"""The read side of threadlog: pure, deterministic folds over a thread's events."""

__all__: list[str] = []
