"""`memory-server import --from FORMAT`: memories kept by other memory tools, one module per format, each
reading its files into candidate memories (`records`); `command` writes them through the same bulk path as
`import` of our own export."""

from __future__ import annotations

from memory_server.admin.foreign import markdown, mcp_memory, mem0
from memory_server.admin.foreign.records import Reader

FORMATS: dict[str, tuple[Reader, tuple[str, ...]]] = {
    "mcp-memory": (mcp_memory.read, mcp_memory.SUFFIXES),
    "mem0": (mem0.read, mem0.SUFFIXES),
    "markdown": (markdown.read, markdown.SUFFIXES),
}
