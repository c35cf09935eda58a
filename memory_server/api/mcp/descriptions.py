"""What the MCP tools say to a model: each tool's description, its parameters' descriptions, the instructions.

Every tool list costs context in every conversation, so each text says what the tool does, when to use it and
when not, and leaves the rest to the schema (bounds, defaults, patterns) and to docs/tools.md (the longer
explanations). A description names only tools that every session listing it also lists (the log tools name
log tools, the read tools read tools, remember and forget each other), so no session is told of a tool it
cannot call; the instructions name only the tools the session lists. `{name}` fields are configured limits
(memory_server.arguments.describe fills them in).
"""

from __future__ import annotations

from collections.abc import Collection

LOG_TOOLS = ("append_memory", "recall_memory", "replay_memory", "list_conversations")
READ_TOOLS = ("recall", "search_memory", "recall_context")
WRITE_TOOLS = ("remember", "forget")

LOGS = {
    "append_memory": (
        "Append JSON objects to this conversation's durable, ordered log (a batch is all or nothing). Use it to "
        "record the conversation itself: turns, tool calls, events. Do not use it for a fact to find later by "
        "meaning (save a memory). Never block on it: on unavailable, buffer and retry with the same "
        "idempotency_key; other errors are permanent."
    ),
    "recall_memory": (
        "The last count items of a conversation's log, oldest first; an unknown conversation is empty. Use it to "
        "rehydrate recent context at the start of a session or after a gap. Do not use it to read from a position "
        "(replay_memory)."
    ),
    "replay_memory": (
        "Up to limit items of a conversation's log from seq offset, ascending. Use it to restore a whole "
        "conversation: start at 0, continue from the last seq + 1, stop at a page shorter than limit. Do not use "
        "it for only the latest items (recall_memory)."
    ),
    "list_conversations": (
        "The site's conversations, newest activity first; page with next_cursor. Use it to find a conversation_id. "
        "Do not use it to read a log (recall_memory, replay_memory)."
    ),
}

SCORES = "Never compare scores across answers."


def remember(full: bool) -> str:
    replaces = "; pass supersedes when it replaces a memory" if full else ""
    return (
        "Save a fact, decision, preference, note or event to find later by meaning. Returns its reference "
        "(mem_...); the same content filed the same way returns it again (created=false), so a retry never "
        f"duplicates. Use it for what later sessions should know{replaces}. Do not use it for the turn-by-turn "
        "record of a conversation."
    )


def recall(full: bool) -> str:
    del full  # the same text on both profiles: the full profile's filters describe themselves
    return (
        "Best-effort lookup: the saved memories most relevant to a question, best first; weak matches allowed, "
        "empty only when nothing is visible. Use it for a quick answer before you respond. Do not use it when a "
        "weak match must not pass as the answer (search_memory) or for a token-bounded pack (recall_context). "
        f"{SCORES}"
    )


def search_memory(full: bool) -> str:
    del full
    return (
        "Strict search: only memories matching every filter exactly with similarity >= min_score; nothing rather "
        "than a weak match. Use it when a wrong answer is worse than none; if empty, lower min_score, drop a "
        "filter or use recall. Do not use it for a quick best-effort answer (recall) or a prompt-sized pack "
        f"(recall_context). {SCORES}"
    )


def recall_context(full: bool) -> str:
    del full
    return (
        "A pack of saved memories for a prompt, ranked as recall ranks them, within max_items and max_tokens. Use "
        "it at the start of a session or task when one quick answer is not enough. Do not use it for a quick "
        "lookup (recall), a strict match (search_memory) or an unbounded dump. The text starts "
        "'{context_header}'; a 'Budget:' line (used_items, used_tokens) means the pack was cut."
    )


def forget(full: bool) -> str:
    instead = "remember the new one with supersedes, which keeps the history" if full else "remember the new one"
    return (
        "Delete a saved memory for good, by its reference (mem_..., from remember or a hit). Use it when a memory "
        f"is wrong or must go. Do not use it because a fact changed: {instead}."
    )


MEMORIES = {
    "remember": remember,
    "recall": recall,
    "search_memory": search_memory,
    "recall_context": recall_context,
    "forget": forget,
}

# Parameters over MCP, a few words each: the schema carries the bounds, defaults and patterns. Per tool.
FILTER = {
    "bucket": "Only this bucket.",
    "project": "Only this project.",
    "team": "Only this team.",
    "type": "Only this type.",
    "tags": "Only memories with all these tags.",
    "occurred_after": "Only occurred_at at or after this.",
    "occurred_before": "Only occurred_at before this.",
    "include_superseded": "Also memories that were replaced.",
    "kinds": "memory (saved) and/or turn (indexed log items).",
    "query": "A question or topic.",
}
CONVERSATION = "Client-minted (a UUID fits), stable, never derived from personal data."
PARAMETERS: dict[str, dict[str, str]] = {
    "append_memory": {
        "conversation_id": CONVERSATION,
        "items": "JSON objects, each at most {max_payload}, the batch {max_batch}.",
        "idempotency_key": "A retry with the same key appends nothing (duplicate=true).",
        "index": "Index this conversation's items for recall (left out: as before).",
        "bucket": "The bucket of its indexed items.",
    },
    "recall_memory": {"conversation_id": CONVERSATION, "count": "How many of the latest items."},
    "replay_memory": {
        "conversation_id": CONVERSATION,
        "limit": "Most items; a shorter page ends the log.",
        "offset": "The first seq (0-based, gapless).",
    },
    "list_conversations": {"limit": "Page size.", "cursor": "The previous page's next_cursor."},
    "remember": {
        "content": "Self-contained text, at most {max_content}.",
        "type": "fact, decision, note, preference, event... Default note.",
        "location": "Path-like, e.g. projects/x/decisions.",
        "project": "Its project.",
        "team": "Its team.",
        "bucket": "Default: default.",
        "tags": "Labels.",
        "metadata": "Any JSON object, at most 64 KiB.",
        "provenance": "Where it came from: source, agent, conversation_id, seq.",
        "occurred_at": "When it happened. Default now.",
        "supersedes": "The reference of the memory it replaces.",
        "expires_at": "When it goes. Default never.",
    },
    "recall": {**FILTER, "limit": "Hits; keep it small."},
    "search_memory": {**FILTER, "limit": "Most hits.", "min_score": "Lowest similarity; default {min_score}."},
    "recall_context": {**FILTER, "max_items": "Most memories.", "max_tokens": "Most tokens in the body."},
    "forget": {"reference": "mem_..., from remember or a hit."},
}

# The instructions a session gets: the lines whose tools it lists.
LOG_LINE = (
    "Conversation logs (append_memory, recall_memory, replay_memory, list_conversations): each conversation's "
    "own durable, ordered record; recall finds their items only where the site or the conversation indexes logs."
)
LOOK_UP = (
    "To look up: recall for a quick best-effort answer; search_memory when only a strict match will do (empty "
    "means nothing passed min_score); recall_context for a token-bounded pack at the start of a task."
)
KEEP = "To keep: append_memory for what was said in this conversation; remember for a fact worth finding later."
FORGET = "forget takes the reference that remember returned and every hit carries."
ERRORS = (
    "Errors start with their code. unavailable is safe to retry (buffer the batch meanwhile; duplicates from "
    "retries are tolerated); every other code is permanent: fix the call instead."
)


def instructions(listed: Collection[str]) -> str:
    """The server instructions for a session that lists `listed`: never a tool it does not list."""
    memories = [name for name in (*WRITE_TOOLS[:1], *READ_TOOLS, *WRITE_TOOLS[1:]) if name in listed]
    logs = all(name in listed for name in LOG_TOOLS)
    lines = [LOG_LINE] if logs else []
    if memories:
        lines.append(f"Saved memories ({', '.join(memories)}): facts, decisions and preferences found by meaning.")
    if all(name in listed for name in READ_TOOLS):
        lines.append(LOOK_UP)
    if "remember" in listed:
        keep = KEEP if logs else "To keep: remember a fact worth finding later."
        lines.append(f"{keep} {FORGET}" if "forget" in listed else keep)
    lines.append(ERRORS)
    return "\n".join(lines)


INSTRUCTIONS = instructions((*LOG_TOOLS, *WRITE_TOOLS, *READ_TOOLS))
