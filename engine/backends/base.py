"""The engine protocol: what every token source (llama.cpp, replay, an upstream server) offers
the service.

Owns `Token`, `Job`, `Timings`, `Finish` and the `Engine` protocol. An engine takes jobs in FIFO
order (llama.cpp runs up to `parallel` of them at once; an upstream sends each as it comes) on
a thread of its own, and streams tokens back through the job's callbacks, called on that
thread (docs/design.md, sections 3 and 5). No Qt, no HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from engine.chat.request import ChatRequest, Sampling


@dataclass(frozen=True, slots=True)
class Token:
    """One decoded token. `text` is split at UTF-8 boundaries (never half a character);
    `t` is time.perf_counter() when it was decoded. `top` holds (text, logprob) alternatives
    when the job asked for them."""

    id: int
    text: str
    t: float
    top: tuple[tuple[str, float], ...] = ()
    # The call guard's mark (engine/backends/llama/guard.py): the text of the token the model
    # itself drew, which the call's grammar refused and replaced with this one; None when the
    # model wrote this token (or no guard ran).
    guided: str | None = None
    # The reasoning budget's mark (engine/backends/llama/budget.py): the engine appended this
    # token, part of the family's reasoning close, instead of sampling one.
    forced: bool = False


@dataclass(frozen=True, slots=True)
class Timings:
    """Per-job timings in milliseconds (llama.cpp's server reports the same figures)."""

    queue_ms: float = 0.0
    prompt_ms: float = 0.0
    ttft_ms: float = 0.0
    decode_ms: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens not computed: from a slot's cache or from disk
    output_tokens: int = 0
    slot: int = -1  # the engine's parallel sequence that served it (-1: none, or no slots)
    disk_tokens: int = 0  # of cached_tokens, those loaded from the disk cache (issue 20)
    draft_tokens: int = 0  # speculation: draft tokens verified (issue 23)
    accepted_tokens: int = 0  # of those, kept (output tokens that cost no step of their own)

    @property
    def acceptance(self) -> float:
        """The share of draft tokens kept (0 without speculation)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def slot_tokens(self) -> int:
        """Prompt tokens reused from a slot's KV cache (in this process)."""
        return self.cached_tokens - self.disk_tokens

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens decoded for this job."""
        return max(self.prompt_tokens - self.cached_tokens, 0)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens * 1000.0 / self.decode_ms if self.decode_ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Where a prompt left the best prefix any cache held (a slot or the disk cache), found at
    admission: what a developer needs to see why reuse failed (issue 20, cache forensics).

    `held` is how many of the prompt's first tokens the best cached candidate matched (it may
    be more than were reused: a busy slot's cache, or a disk entry cut at another boundary).
    `prompt_char` is where, in the prompt's text as the engine detokenizes it (special tokens
    written out), the first differing token starts; `cached_text` is what that candidate held
    from there on and `prompt_text` what the prompt has instead (a few dozen tokens each, ""
    where one of them ends there)."""

    held: int = 0
    source: str = ""  # "slot", "disk", or "" when no cache shared a token with the prompt
    prompt_char: int = 0
    cached_text: str = ""
    prompt_text: str = ""


@dataclass(frozen=True, slots=True)
class Finish:
    """How a job ended: reason is "stop", "length", "cancelled" or "error"."""

    reason: str
    timings: Timings
    error: str | None = None
    stop_sequence: str | None = None  # the stop string that ended the job, if one did
    # An "error" that stands for an HTTP status: an upstream's, or 400 for a job the llama
    # engine refused at admission (its prompt, its grammar).
    status: int | None = None
    prefix: PrefixMatch | None = None  # the llama engine's cache forensics (None elsewhere)


class Guard(Protocol):
    """What a job's call guard asks of the service (issue 22): the GBNF of one call in the
    family's syntax, and where the parser has a real call open. `opened` runs on the engine
    thread after each token is delivered (the parser has read it): the character offset, in the
    job's output, of the open call's opener, or None when no call is open."""

    grammar: str

    def opened(self) -> int | None: ...


class Budget(Protocol):
    """What a job's reasoning budget asks of the service: `close`, the text that ends the
    family's reasoning (its writer's), and `spent(held)`, asked on the engine thread before
    each token is drawn: True when the parser has the reasoning open and it holds its budget's
    tokens, counting `held` tokens the engine has not delivered yet (a stop string's prefix).
    The engine then appends `close`'s tokens as if sampled (engine/backends/llama/budget.py)."""

    close: str

    def spent(self, held: int = 0) -> bool: ...


@dataclass(eq=False)
class Job:
    """One generation. The engine calls `on_token` for each token and `on_finish` once, both
    on its own thread. `cancel()` may be called from any thread; the engine stops at the next
    token."""

    prompt: str
    max_tokens: int | None = None
    prompt_ids: tuple[int, ...] = ()  # the prompt's tokens when the caller has them
    sampling: Sampling = field(default_factory=Sampling)
    stop: tuple[str, ...] = ()
    grammar: str | None = None
    guard: Guard | None = None  # guarded calls (the llama engine; ignored where no grammar runs)
    budget: Budget | None = None  # the reasoning budget (an engine that can force tokens)
    top_logprobs: int = 0
    on_token: Callable[[Token], None] = lambda tok: None
    on_finish: Callable[[Finish], None] = lambda fin: None
    submitted_at: float = 0.0
    cancelled: threading.Event = field(default_factory=threading.Event)
    # The parallel sequence serving it, set by the engine when it takes the job (-1: waiting,
    # or an engine without slots); read by the window while the job runs (Timings.slot after).
    slot: int = -1

    def cancel(self) -> None:
        self.cancelled.set()


class Engine(Protocol):
    """A token source. `submit` never blocks; jobs run FIFO on the engine's thread."""

    name: str
    n_ctx: int
    ready: threading.Event  # set once the model is loaded (at once for replay)
    load_error: str | None
    state: str  # "loading" | "idle" | "generating" | "error" | "closed"
    # The texts of the vocabulary's special tokens, where the engine has a vocabulary (llama.cpp);
    # () for the others (replay, upstream): engine/chat/special.py then looks for the usual shapes.
    special_texts: tuple[str, ...]

    def submit(self, job: Job) -> None: ...

    def prepare(self, job: Job, request: ChatRequest) -> tuple[str, str] | None:
        """Called by the service before `submit`, with the request the job answers. An engine
        that plays recorded outputs (engine/record/replay.py) chooses the job's output here and
        returns the (start state, family) it was recorded with, so it is parsed as it was
        live ("" family: the pack's); an engine that generates returns None."""
        ...

    def tokenize(self, text: str) -> list[int]: ...

    def queue_depth(self) -> int: ...

    def close(self) -> None: ...
