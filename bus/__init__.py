"""The message bus of octos-gateway, and the octos-core domain language it carries.

Two groups of names, kept apart in `__all__`:

- **The bus**: pipes (bounded, multi-producer, closing like Rust's mpsc), the two ends of the
  bus (`create_bus`: `AgentHandle` for the agent side, `BusPublisher` for the channels), the
  envelopes that cross it (`InboundMessage` in; outbound events out: a reply
  `OutboundMessage`, a `StreamSnapshot`, `TypingStarted` / `TypingStopped`) with the metadata
  keys of a reply, the inbound sender a channel publishes to, and session keys. Keyed lanes
  (`bus.lanes`, imported by their two users) order the work on each side of it.
- **The octos-core domain types**: conversation messages and their identities, tasks and the
  messages agents exchange about them, session summaries, token usage, errors that say what
  to do, byte-budget text utilities and abort triggers. The project implements octos-core, so
  these are its public language even where only the seeds' behaviour (and tests) use them yet.

`bus` imports nothing of the project; everything else may import it.
"""

from bus.abort import (
    ABORT_REPLIES,
    ABORT_TRIGGERS,
    AbortLanguage,
    abort_language,
    abort_response,
    is_abort_trigger,
)
from bus.envelope import (
    ANSWERS,
    BUTTON_DATA_MAX_BYTES,
    CALLBACK,
    DELETE,
    EDIT,
    FAILED,
    REPLY_TO,
    REPLY_TO_TEXT_MAX,
    SESSION,
    TAPPED_SENT_AT,
    Button,
    ButtonRows,
    ButtonsUsed,
    InboundMessage,
    InboundRefused,
    InboundSender,
    OutboundEvent,
    OutboundMessage,
    OutboundSink,
    ReactionChanged,
    SenderRefused,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
    quoted,
)
from bus.errors import ErrorKind, GatewayError, InvalidStateTransition, UnsupportedSchemaVersion
from bus.message import (
    SESSION_SUMMARY_SCHEMA_VERSION,
    ClientMessageId,
    DecisionRecord,
    FileRecord,
    Message,
    MessageRole,
    SessionSummary,
    ThreadId,
    TokenUsage,
    ToolCall,
    TurnId,
    WireModel,
    new_turn_id,
    thread_rooted_at,
    turn_made_at,
)
from bus.queue import (
    Admitted,
    AgentHandle,
    BusPublisher,
    InboundLog,
    PipeClosed,
    PipeReceiver,
    PipeSender,
    create_bus,
    pipe,
)
from bus.session_key import KNOWN_CHANNELS, MAIN_PROFILE, SessionKey, is_channel_name
from bus.task import (
    TASK_RESULT_SCHEMA_VERSION,
    TASK_TRANSITIONS,
    AgentId,
    AgentMessage,
    BlockedStatus,
    CodeKind,
    CompletedStatus,
    ContextRequest,
    ContextResponse,
    CustomKind,
    EpisodeRef,
    FailedStatus,
    GitState,
    InProgressStatus,
    PendingStatus,
    PlanKind,
    ReviewKind,
    Task,
    TaskAssign,
    TaskComplete,
    TaskContext,
    TaskId,
    TaskKind,
    TaskResult,
    TaskStatus,
    TaskUpdate,
    TestKind,
    can_transition,
    new_task_id,
)
from bus.text import (
    DEFAULT_TOOL_OUTPUT_LIMIT,
    TOOL_OUTPUT_LIMITS,
    tool_output_limit,
    truncate_head_tail,
    truncate_utf8,
    truncated_utf8,
    utf8_len,
)

# The order of each group is by topic, not alphabetical: keep ruff's sort off this list.
__all__ = [  # noqa: RUF022
    # -- the bus ------------------------------------------------------------------------------
    # pipes and the bus's two ends
    "pipe",
    "PipeSender",
    "PipeReceiver",
    "PipeClosed",
    "create_bus",
    "AgentHandle",
    "BusPublisher",
    "InboundLog",
    "Admitted",
    # envelopes: inbound, and the outbound events
    "InboundMessage",
    "InboundSender",
    "OutboundSink",
    "InboundRefused",
    "SenderRefused",
    "OutboundEvent",
    "OutboundMessage",
    "StreamSnapshot",
    "TypingStarted",
    "TypingStopped",
    "ReactionChanged",
    "ButtonsUsed",
    "Button",
    "ButtonRows",
    "BUTTON_DATA_MAX_BYTES",
    "ANSWERS",
    "SESSION",
    "FAILED",
    "CALLBACK",
    "DELETE",
    "EDIT",
    "REPLY_TO",
    "REPLY_TO_TEXT_MAX",
    "quoted",
    "TAPPED_SENT_AT",
    # session keys
    "SessionKey",
    "KNOWN_CHANNELS",
    "MAIN_PROFILE",
    "is_channel_name",
    # -- the octos-core domain types ----------------------------------------------------------
    # conversation messages and identities
    "WireModel",
    "Message",
    "MessageRole",
    "ToolCall",
    "ClientMessageId",
    "ThreadId",
    "TurnId",
    "new_turn_id",
    "turn_made_at",
    "thread_rooted_at",
    # tasks
    "Task",
    "TaskId",
    "new_task_id",
    "AgentId",
    "TaskStatus",
    "PendingStatus",
    "InProgressStatus",
    "BlockedStatus",
    "CompletedStatus",
    "FailedStatus",
    "TASK_TRANSITIONS",
    "can_transition",
    "TaskKind",
    "PlanKind",
    "CodeKind",
    "ReviewKind",
    "TestKind",
    "CustomKind",
    "TaskContext",
    "GitState",
    "EpisodeRef",
    "TaskResult",
    "TASK_RESULT_SCHEMA_VERSION",
    # messages between agents
    "AgentMessage",
    "TaskAssign",
    "TaskUpdate",
    "TaskComplete",
    "ContextRequest",
    "ContextResponse",
    # session summaries and token usage
    "SessionSummary",
    "DecisionRecord",
    "FileRecord",
    "SESSION_SUMMARY_SCHEMA_VERSION",
    "TokenUsage",
    # errors
    "GatewayError",
    "ErrorKind",
    "InvalidStateTransition",
    "UnsupportedSchemaVersion",
    # text utilities
    "truncate_utf8",
    "truncated_utf8",
    "truncate_head_tail",
    "utf8_len",
    "tool_output_limit",
    "TOOL_OUTPUT_LIMITS",
    "DEFAULT_TOOL_OUTPUT_LIMIT",
    # abort triggers
    "is_abort_trigger",
    "abort_language",
    "abort_response",
    "AbortLanguage",
    "ABORT_TRIGGERS",
    "ABORT_REPLIES",
]
