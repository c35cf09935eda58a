"""The one set of bounds, defaults and descriptions of the saved-memory operations.

MCP tools, REST routes and the console all validate through these models (see memory_server.arguments). Field
validators run the same checks `remember` runs (memory_server.memories.validation), so every transport names the
same field with the same message.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo
from pydantic.json_schema import SkipJsonSchema

from memory_server.arguments import NULL_IS_DEFAULT, WHOLE_NUMBER, Params, size_text
from memory_server.memories.validation import (
    LOCATION,
    LOCATION_RULE,
    MAX_JSON_BYTES,
    MAX_LOCATION,
    MAX_QUERY,
    MAX_REFERENCE,
    MAX_TAGS,
    SHORT_WORD,
    WORD_RULE,
    check_query,
    check_tags,
    check_timestamp,
    check_word,
)
from memory_server.values import check_text

RECALL_LIMIT, MAX_RECALL = 5, 50
SEARCH_LIMIT, MAX_SEARCH = 10, 100
CONTEXT_ITEMS, MAX_CONTEXT_ITEMS = 8, 50
CONTEXT_TOKENS, MAX_CONTEXT_TOKENS = 1500, 12000
LIST_LIMIT, MAX_LIST = 20, 100
ACTIVITY_DAYS, MAX_ACTIVITY_DAYS = 90, 366
MAX_PROVENANCE_FILTER = 512  # characters of a provenance value a listing filters on

# Python's str.isspace() characters: `content` and `query` must hold something else (str.strip() is the check).
NOT_BLANK = r"[^\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def _word(value: str | None, info: ValidationInfo) -> str | None:
    return check_word(info.field_name or "value", value)


def _tags(value: list[str] | None) -> list[str] | None:
    return None if value is None else list(check_tags(value))


def _query(value: str) -> str:
    return check_query(value)


def _text(value: str | None, info: ValidationInfo) -> str | None:
    """A filter's text, which a backend must be able to compare (no NUL, no lone surrogate)."""
    return None if value is None else check_text(info.field_name or "value", value)


def _instant(value: str | None, info: ValidationInfo) -> str | None:
    """Normalised to UTC as occurred_at is stored, so the store compares like with like."""
    return None if value is None else check_timestamp(info.field_name or "value", value)


WORD = AfterValidator(_word)
TAGS = AfterValidator(_tags)
INSTANT = AfterValidator(_instant)
TEXT = AfterValidator(_text)


def word_field(description: str) -> Any:
    return Field(json_schema_extra={"pattern": SHORT_WORD.pattern}, description=f"{description} ({WORD_RULE}).")


# The item schema shows the rule; check_tags enforces it (naming the field, as every transport does).
Tag = Annotated[str, Field(json_schema_extra={"pattern": SHORT_WORD.pattern})]


def tags_field(description: str) -> Any:
    return Field(max_length=MAX_TAGS, description=description)


def bounded_field(low: int, high: int, default: int, description: str) -> Any:
    return Field(ge=low, le=high, description=f"{description}: {low}-{high}, default {default}.")


# Patterns and lengths shown in the schema (so clients and generators know them) are checked by the
# validators, which name the field in their message as every transport does.
Query = Annotated[
    str,
    Field(
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY, "pattern": NOT_BLANK},
        description=(
            f"Natural-language question or topic (not empty or whitespace only; at most {MAX_QUERY} characters)."
        ),
    ),
    AfterValidator(_query),
]
Reference = Annotated[
    str, Field(description="The memory's reference, as remember returned it or a hit carries it, e.g. mem_3f2a9c....")
]
Timestamp = Annotated[
    str | None,
    Field(
        json_schema_extra={"format": "date-time"},
        description=(
            "RFC3339 timestamp of when the remembered thing happened, e.g. 2026-05-08T14:00:00Z. Default now."
        ),
    ),
]

FilterProject = Annotated[str | None, word_field("Only memories of exactly this project"), WORD]
FilterTeam = Annotated[str | None, word_field("Only memories of exactly this team"), WORD]
FilterBucket = Annotated[
    str | None, word_field("Only memories in this bucket; leave it out to search every bucket"), WORD
]
FilterType = Annotated[str | None, word_field("Only memories of exactly this type, e.g. decision"), WORD]
FilterTags = Annotated[
    list[Tag] | None,
    tags_field('Only memories carrying every one of these tags: a JSON array of strings, e.g. ["docs"].'),
    TAGS,
]
# A half-open window on occurred_at: [occurred_after, occurred_before).
OccurredAfter = Annotated[
    str | None,
    Field(
        json_schema_extra={"format": "date-time"},
        description=(
            "Only memories whose occurred_at is at or after this RFC3339 timestamp, e.g. 2026-05-01T00:00:00Z."
        ),
    ),
    INSTANT,
]
OccurredBefore = Annotated[
    str | None,
    Field(
        json_schema_extra={"format": "date-time"},
        description=("Only memories whose occurred_at is strictly before this RFC3339 timestamp."),
    ),
    INSTANT,
]


Kinds = Annotated[
    list[Literal["memory", "turn"]] | None,
    Field(
        min_length=1,
        max_length=2,
        description=(
            "Which entries: memory (saved with remember), turn (conversation log items of sites or conversations that "
            'index their logs; a hit\'s provenance names its conversation_id and seq). Default both, e.g. ["memory"] '
            "for saved memories alone."
        ),
    ),
    NULL_IS_DEFAULT,
]


class FilterParams(Params):
    kinds: Kinds = None
    bucket: FilterBucket = None
    project: FilterProject = None
    team: FilterTeam = None
    type: FilterType = None
    tags: FilterTags = None
    occurred_after: OccurredAfter = None
    occurred_before: OccurredBefore = None
    include_superseded: Annotated[
        bool,
        Field(
            description=(
                "Also memories another one superseded (replaced): by default search_memory and recall_context leave "
                "them out and recall ranks each below the memory that replaced it."
            )
        ),
        NULL_IS_DEFAULT,
    ] = False


class RememberParams(Params):
    content: Annotated[
        str,
        Field(
            json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
            description=(
                "The fact, decision or note to keep, as self-contained text: 1 character to "
                "{max_content} (UTF-8); larger "
                "is payload_too_large."
            ),
        ),
    ]
    type: Annotated[
        str | None, word_field("fact, decision, note, preference, event, or another short word. Default note"), WORD
    ] = None
    location: Annotated[
        str | None,
        Field(
            json_schema_extra={"pattern": LOCATION.pattern},
            description=f"Where it is filed: {LOCATION_RULE}, e.g. projects/memory-os/decisions.",
        ),
    ] = None
    project: Annotated[str | None, word_field("The project it belongs to"), WORD] = None
    team: Annotated[str | None, word_field("The team it belongs to"), WORD] = None
    bucket: Annotated[str | None, word_field("The bucket to keep it in. Default default"), WORD] = None
    tags: Annotated[
        list[Tag] | None,
        tags_field(f'Up to {MAX_TAGS} short labels ({WORD_RULE} each): a JSON array of strings, e.g. ["release"].'),
        TAGS,
    ] = None
    metadata: Annotated[
        dict[str, Any] | None,
        Field(
            description=(
                f"Any JSON object, kept and returned as given (at most {size_text(MAX_JSON_BYTES)} serialized)."
            )
        ),
    ] = None
    provenance: Annotated[
        dict[str, Any] | None,
        Field(
            description=(
                "Where it came from, as a JSON object: source, agent, conversation_id and seq of the log item it was "
                "taken from..."
            )
        ),
    ] = None
    occurred_at: Timestamp = None
    supersedes: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=MAX_REFERENCE,
            description=(
                "The reference of the memory this one replaces (a changed decision, a new value): the old one is kept, "
                "marked superseded_by this one and valid until this one's occurred_at, and left out of search_memory "
                "and recall_context. If it was superseded already, the newest memory of its chain is replaced."
            ),
        ),
    ] = None
    expires_at: Annotated[
        str | None,
        Field(
            json_schema_extra={"format": "date-time"},
            description=(
                "RFC3339 timestamp from which the memory is never returned; it is then deleted for good. Default: it "
                "never expires."
            ),
        ),
    ] = None


class RecallParams(FilterParams):
    query: Query
    limit: Annotated[
        int,
        bounded_field(1, MAX_RECALL, RECALL_LIMIT, "Small result count; keep it small for a quick lookup"),
        WHOLE_NUMBER,
        NULL_IS_DEFAULT,
    ] = RECALL_LIMIT


class SearchParams(FilterParams):
    query: Query
    limit: Annotated[
        int, bounded_field(1, MAX_SEARCH, SEARCH_LIMIT, "At most this many hits"), WHOLE_NUMBER, NULL_IS_DEFAULT
    ] = SEARCH_LIMIT
    min_score: Annotated[
        float | None,
        Field(
            ge=0.0,
            le=1.0,
            description=(
                "Lowest cosine similarity a hit may have, 0-1; default {min_score}. Lower it for "
                "broader strict search, "
                "raise it for fewer, closer hits."
            ),
        ),
    ] = None


class ContextParams(FilterParams):
    query: Query
    max_items: Annotated[
        int,
        bounded_field(1, MAX_CONTEXT_ITEMS, CONTEXT_ITEMS, "Maximum number of memories in the pack"),
        WHOLE_NUMBER,
        NULL_IS_DEFAULT,
    ] = CONTEXT_ITEMS
    max_tokens: Annotated[
        int,
        bounded_field(
            1,
            MAX_CONTEXT_TOKENS,
            CONTEXT_TOKENS,
            "Maximum length of the rendered context body in tokens (the bundled model's tokenizer)",
        ),
        WHOLE_NUMBER,
        NULL_IS_DEFAULT,
    ] = CONTEXT_TOKENS


class ReferenceParams(Params):
    reference: Reference


class ListMemoriesParams(Params):
    kinds: Kinds = None
    project: FilterProject = None
    team: FilterTeam = None
    bucket: FilterBucket = None
    type: FilterType = None
    tag: FilterTags = None
    location: Annotated[
        str | None, Field(max_length=MAX_LOCATION, description="Only memories filed exactly here."), TEXT
    ] = None
    provenance_source: Annotated[
        str | None,
        Field(max_length=MAX_PROVENANCE_FILTER, description=("Only memories whose provenance.source equals this.")),
        TEXT,
    ] = None
    provenance_agent: Annotated[
        str | None,
        Field(max_length=MAX_PROVENANCE_FILTER, description=("Only memories whose provenance.agent equals this.")),
        TEXT,
    ] = None
    provenance_conversation_id: Annotated[
        str | None,
        Field(
            max_length=MAX_PROVENANCE_FILTER,
            description=("Only memories whose provenance.conversation_id equals this."),
        ),
        TEXT,
    ] = None
    occurred_after: OccurredAfter = None
    occurred_before: OccurredBefore = None
    limit: Annotated[int, bounded_field(1, MAX_LIST, LIST_LIMIT, "Page size"), WHOLE_NUMBER, NULL_IS_DEFAULT] = (
        LIST_LIMIT
    )
    cursor: Annotated[str | None, Field(description="Opaque: the previous page's next_cursor.")] = None
    order: Annotated[
        Literal["created", "occurred"],
        Field(
            description=(
                "Newest first by created_at (when it was saved; the default) or by occurred_at (when it happened)."
            )
        ),
        NULL_IS_DEFAULT,
    ] = "created"


class ActivityParams(Params):
    days: Annotated[
        int,
        bounded_field(1, MAX_ACTIVITY_DAYS, ACTIVITY_DAYS, "Days counted back from today (UTC)"),
        WHOLE_NUMBER,
        NULL_IS_DEFAULT,
    ] = ACTIVITY_DAYS


class UpdateParams(Params):
    """A change of some attributes (PATCH): only the fields present change. null resets a field to what
    `remember` defaults it to (location, project, team, supersedes, expires_at: unset; type: note; bucket:
    default; tags: []; metadata, provenance: {}); content and occurred_at cannot be null."""

    content: Annotated[
        str | SkipJsonSchema[None],
        Field(
            json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
            description="New content (re-embeds the memory); not null.",
        ),
    ] = None
    type: Annotated[str | None, word_field("New type"), WORD] = None
    location: Annotated[
        str | None,
        Field(json_schema_extra={"pattern": LOCATION.pattern}, description=f"New filing place ({LOCATION_RULE})."),
    ] = None
    project: Annotated[str | None, word_field("New project"), WORD] = None
    team: Annotated[str | None, word_field("New team"), WORD] = None
    bucket: Annotated[str | None, word_field("New bucket"), WORD] = None
    tags: Annotated[list[Tag] | None, tags_field(f"New tags (replaces them all; at most {MAX_TAGS})."), TAGS] = None
    metadata: Annotated[dict[str, Any] | None, Field(description="Replaces the whole object.")] = None
    provenance: Annotated[dict[str, Any] | None, Field(description="Replaces the whole object.")] = None
    occurred_at: Annotated[
        str | SkipJsonSchema[None],
        Field(
            json_schema_extra={"format": "date-time"},
            description=("New time (re-embeds: the date is part of the text); not null."),
        ),
    ] = None
    supersedes: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=MAX_REFERENCE,
            description=(
                "The memory this one replaces (as in remember); null: it replaces none, and the one it replaced is "
                "current again."
            ),
        ),
    ] = None
    expires_at: Annotated[
        str | None,
        Field(
            json_schema_extra={"format": "date-time"}, description=("When it expires (as in remember); null: never.")
        ),
    ] = None

    def changes(self) -> dict[str, Any]:
        """The fields the request set, with their values (None: reset)."""
        return self.model_dump(include=self.model_fields_set)
