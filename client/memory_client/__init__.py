"""memory-client: typed sync and async access to a memory-server, and a recorder that never blocks."""

from memory_client._api import UNSET, Unset
from memory_client._spool import SpoolInUse
from memory_client.async_client import AsyncClient
from memory_client.client import Client, __version__
from memory_client.errors import (
    Forbidden,
    InvalidParameters,
    MemoryServerError,
    NotFound,
    PayloadTooLarge,
    TransportError,
    Unauthorized,
    Unavailable,
    UnprocessableParameters,
)
from memory_client.models import (
    AppendAck,
    Budget,
    ContextItem,
    ContextPack,
    ConversationDeleted,
    ConversationPage,
    ConversationSummary,
    Forgotten,
    Hit,
    LogItem,
    Memory,
    MemoryPage,
    Remembered,
)
from memory_client.recorder import AsyncRecorder, Recorder, RecorderStats

__all__ = [
    "UNSET",
    "Unset",
    "SpoolInUse",
    "AsyncClient",
    "Client",
    "__version__",
    "MemoryServerError",
    "InvalidParameters",
    "UnprocessableParameters",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "Unavailable",
    "TransportError",
    "AppendAck",
    "Budget",
    "ContextItem",
    "ContextPack",
    "ConversationDeleted",
    "ConversationPage",
    "ConversationSummary",
    "Forgotten",
    "Hit",
    "LogItem",
    "Memory",
    "MemoryPage",
    "Remembered",
    "AsyncRecorder",
    "Recorder",
    "RecorderStats",
]
