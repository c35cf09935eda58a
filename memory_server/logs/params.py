"""The one set of bounds, defaults and descriptions of the conversation-log operations.

MCP tools, REST routes and the MCP fast path all validate through these models (see memory_server.arguments).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from memory_server.arguments import NULL_IS_DEFAULT, WHOLE_NUMBER, Params
from memory_server.logs.validation import (
    CONVERSATION_ID,
    CONVERSATION_ID_RULE,
    MAX_ITEMS,
    MAX_KEY_LENGTH,
    check_conversation_id,
)
from memory_server.memories.validation import SHORT_WORD, WORD_RULE, check_word

MAX_PAGE = 1000
TAIL_COUNT = 50
LIST_LIMIT = 100
# REST reads replay when offset or limit is given; MCP's replay_memory requires limit.
REST_REPLAY_LIMIT = 100

ConversationId = Annotated[
    str,
    Field(
        json_schema_extra={"pattern": CONVERSATION_ID.pattern},
        description=f"The pseudonymous handle of the conversation, minted by the client: {CONVERSATION_ID_RULE} "
        "(UUIDs and nanoids fit), stable for one conversation, never derived from personal data such "
        "as names, e-mail addresses or account ids. A malformed id is rejected outright (invalid_parameters); an "
        "unknown one reads as an empty list.",
    ),
    AfterValidator(check_conversation_id),
]
Items = Annotated[
    list[dict[str, Any]],
    Field(
        json_schema_extra={"minItems": 1, "maxItems": MAX_ITEMS},
        description=f"1-{MAX_ITEMS} JSON objects, appended in order as one all-or-nothing batch (each at most "
        "{max_payload} serialized, the batch at most {max_batch}; larger is payload_too_large). Each payload is "
        "stored verbatim and comes back unchanged.",
    ),
]
IdempotencyKey = Annotated[
    Annotated[str, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_KEY_LENGTH})] | None,
    Field(
        description=f"Optional, 1-{MAX_KEY_LENGTH} characters. A retry of the batch with the same key "
        "on the same conversation appends nothing and returns the original acknowledgement with duplicate=true. "
        "Without a key a retry appends again."
    ),
]
Count = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_PAGE,
        description=f"How many items to return, counted from the end of the log: the "
        "last count items in ascending sequence order, fewer if the log holds fewer, none for 0. "
        f"Default {TAIL_COUNT}, "
        f"maximum {MAX_PAGE}.",
    ),
    WHOLE_NUMBER,
    NULL_IS_DEFAULT,
]
Limit = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_PAGE,
        description=f"Maximum number of items to return (0-{MAX_PAGE}, required), in ascending "
        "sequence order starting at offset. A page shorter than limit, including an empty one, means the end of the "
        "log was reached.",
    ),
    WHOLE_NUMBER,
]
Offset = Annotated[
    int,
    Field(
        ge=0,
        description="Sequence number to start reading from (>= 0, default 0); sequence numbers are "
        "per conversation, 0-based and gapless, so this is also the position in the log.",
    ),
    WHOLE_NUMBER,
    NULL_IS_DEFAULT,
]
PageSize = Annotated[
    int,
    Field(ge=1, le=MAX_PAGE, description=f"Page size: 1-{MAX_PAGE}, default {LIST_LIMIT}."),
    WHOLE_NUMBER,
    NULL_IS_DEFAULT,
]
Cursor = Annotated[
    str | None, Field(description="Opaque: the next_cursor of the previous page. Leave it out for the first page.")
]


Index = Annotated[
    bool | None,
    Field(
        description=(
            "Whether this conversation's items become recallable entries (kind turn) that recall, search_memory and "
            "recall_context find: true or false decides for this conversation from now on (its earlier items "
            "included); left out, as decided before, else as the site's setting."
        )
    ),
]
Bucket = Annotated[
    str | None,
    Field(
        json_schema_extra={"pattern": SHORT_WORD.pattern},
        description=(
            f"The bucket this conversation's indexed turns are filed in ({WORD_RULE}); kept for its later appends. "
            "Default default."
        ),
    ),
    AfterValidator(lambda value: check_word("bucket", value)),
]


class AppendParams(Params):
    conversation_id: ConversationId
    items: Items
    idempotency_key: IdempotencyKey = None
    index: Index = None
    bucket: Bucket = None


class TailParams(Params):
    conversation_id: ConversationId
    count: Count = TAIL_COUNT


class ReplayParams(Params):
    conversation_id: ConversationId
    limit: Limit
    offset: Offset = 0


class ListConversationsParams(Params):
    limit: PageSize = LIST_LIMIT
    cursor: Cursor = None


class DeleteConversationParams(Params):
    conversation_id: ConversationId
