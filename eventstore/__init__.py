"""The write side of threadlog: event models, the SQLite log, streams, forks, integrity."""

from .errors import (
    Claimed,
    ConcurrencyError,
    Disconnected,
    ForkRefused,
    IntegrityError,
    InvalidEvent,
    Locked,
    OldPagesKept,
    ReportRefused,
    SchemaError,
    StaleSnapshot,
    StoreError,
    ThreadNotFound,
)
from .events import CATALOGUE, Event, EventData, Meta
from .verify import VerifyReport
from .recorded import RecordedEvent, ThreadInfo
from .restore import RestoreReport
from .forks import DEFAULT_PLACEHOLDER, FORK_BOILERPLATE
from .ranges import segments
from .store import Store

__all__ = [
    "CATALOGUE",
    "DEFAULT_PLACEHOLDER",
    "FORK_BOILERPLATE",
    "Claimed",
    "ConcurrencyError",
    "Disconnected",
    "Event",
    "EventData",
    "ForkRefused",
    "IntegrityError",
    "InvalidEvent",
    "Locked",
    "Meta",
    "OldPagesKept",
    "RecordedEvent",
    "ReportRefused",
    "RestoreReport",
    "SchemaError",
    "StaleSnapshot",
    "Store",
    "StoreError",
    "ThreadInfo",
    "ThreadNotFound",
    "VerifyReport",
    "segments",
]
