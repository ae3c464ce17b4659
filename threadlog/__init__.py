"""threadlog: an event-sourced conversation store for LLM agents.

Import everything from here: `from threadlog import Store, ...`.
"""

from eventstore import (
    ConcurrencyError,
    Event,
    ForkRefused,
    IntegrityError,
    InvalidEvent,
    RecordedEvent,
    SchemaError,
    Store,
    StoreError,
    ThreadInfo,
    ThreadNotFound,
)
from eventstore.events import (
    CompactionRecorded,
    InterruptCancelled,
    InterruptRaised,
    InterruptResolved,
    MessageAppended,
    MetadataSet,
    RunFinished,
    RunStarted,
    TitleSet,
    TodosSet,
)

__all__ = [
    "CompactionRecorded",
    "ConcurrencyError",
    "Event",
    "ForkRefused",
    "IntegrityError",
    "InterruptCancelled",
    "InterruptRaised",
    "InterruptResolved",
    "InvalidEvent",
    "MessageAppended",
    "MetadataSet",
    "RecordedEvent",
    "RunFinished",
    "RunStarted",
    "SchemaError",
    "Store",
    "StoreError",
    "ThreadInfo",
    "ThreadNotFound",
    "TitleSet",
    "TodosSet",
]
