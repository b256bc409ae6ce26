"""One request's generation state: its prompt, sampler, stop strings, output stream and stats.

The batching loop owns the order of work and the inputs it feeds the cache (feed.py); a
Sequence owns its output stream: it decides what each sampled token means (end of turn, a stop
string, the token limit, text to stream: never half a UTF-8 character and never the start of a
stop string that may still complete, logprobs) and sends the final record.

Stop strings with structured output (`format`): the output must always parse, so a stop string
only ends the output where the text before it is a whole document by the grammar (read from
the streamed text with `JsonConstraint.reader()`). A match inside a JSON string, a key or an
unfinished value is ignored and streams on as text; nothing is held back for a stop string
that could not be honoured where it starts. The grammar allows nothing after an object, array
or string, so in practice such a stop string can only cut a top-level number or literal
(`12` when `3` is a stop in `123`); a finished document ends the sequence by itself.

Text held back for a stop string that never completed is sent when the sequence ends for any
other reason (end of turn, the grammar's end, the token limit, a cancel).

Stream chunks: when tokens come faster than `stream_interval` apart, the text of several goes
out as one chunk, sent before its oldest part would wait longer than the interval (50 ms
by default, `HEARTH_STREAM_INTERVAL_MS`; 0 sends every token alone). The first token and
anything slower go out at once. One chunk per token costs the HTTP thread, the service and
every client a wake-up and a JSON parse per token, which on a machine whose cores all compute
slows generation by several percent; 20 updates a second read as continuous.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import env
from ..engine.prompt_cache import group_start
from ..engine.sampling import Sampler, SamplingOptions, log_softmax
from ..engine.tokenizer import StreamDecoder, Tokenizer
from ..options import default
from .protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionError,
    CompletionOptions,
    CompletionRequest,
    TokenLogprob,
)

__all__ = ["Sequence", "SequenceSettings", "PromptTooLongError", "settings_from_request", "Event"]

# What a sequence's `events` carry: a completion's protocol lines, or an embedding's result.
Event = CompletionChunk | CompletionDone | CompletionError | dict[str, Any]


def _stream_interval() -> float:
    """`HEARTH_STREAM_INTERVAL_MS` in seconds (default 50 ms; see the module docstring)."""
    return env.whole("HEARTH_STREAM_INTERVAL_MS", 50) / 1000


class PromptTooLongError(ValueError):
    pass


@dataclass
class SequenceSettings:
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    num_predict: int = default("num_predict")
    num_keep: int = default("num_keep")
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    truncate: bool = True
    shift: bool = True
    stream_interval: float = field(default_factory=_stream_interval)  # seconds
    show_tokens: tuple[str, ...] = ()  # special tokens whose text the output keeps
    speculate: bool = True  # draft where the runner can check drafts exactly (speculation.py)


def settings_from_request(req: CompletionRequest) -> SequenceSettings:
    """A request's settings (its options' types were checked on arrival: protocol.from_wire);
    options left out take the defaults. ValueError says what is wrong."""
    opts: CompletionOptions = req.options
    top = req.top_logprobs
    if not 0 <= top <= 20:
        raise ValueError("top_logprobs must be between 0 and 20")
    return SequenceSettings(
        sampling=opts,  # the sampler takes the declared defaults of options left out
        num_predict=default("num_predict") if opts.num_predict is None else opts.num_predict,
        num_keep=default("num_keep") if opts.num_keep is None else opts.num_keep,
        stop=tuple(opts.stop),
        logprobs=req.logprobs or top > 0,
        top_logprobs=top,
        truncate=req.truncate,
        shift=req.shift,
        show_tokens=tuple(t for t in req.show_tokens if isinstance(t, str)),
        speculate=opts.speculate is not False,
    )


class Sequence:
    """See the module docstring. Created on a request thread, then driven by the loop."""

    def __init__(
        self,
        prompt: list[int],
        settings: SequenceSettings,
        tokenizer: Tokenizer,
        num_ctx: int,
        constraint: Any = None,
        embedding: bool = False,
        same_batch: list[int] | None = None,
    ) -> None:
        """`same_batch[i]` (one per prompt input, default all 0): the next N inputs must be
        evaluated in input i's batch (an image's positions); such runs are never split by
        batching, truncation, the prompt cache or a context shift."""
        if not prompt:
            raise ValueError("the prompt is empty")
        if same_batch is None:
            marks = [0] * len(prompt)
        else:
            marks = list(same_batch)
            if len(marks) != len(prompt) or any(
                m < 0 or i + m >= len(prompt) for i, m in enumerate(marks)
            ):
                raise ValueError("same_batch needs one count per prompt input, within the prompt")
        self.settings = settings
        self.tokenizer = tokenizer
        self.num_ctx = num_ctx
        self.embedding = embedding
        self.constraint = constraint
        keep = settings.num_keep
        self.num_keep = len(prompt) if keep < 0 else max(0, keep)
        self.num_keep = min(self.num_keep, num_ctx - 1)
        self.truncated = False
        if len(prompt) > num_ctx and not embedding:
            prompt, marks = self._truncate(prompt, marks)
        self.prompt = prompt
        self.marks = marks  # same_batch of each prompt input
        cap = 10 * num_ctx  # a runaway generation through repeated shifts ends here
        n = settings.num_predict
        self.num_predict = cap if n < 0 or n > cap else n
        self.events: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.done = False
        self.shifted = False
        # Why the runner switched drafting off (runner/draft_cost.py), reported when it has.
        self.speculation_off: str | None = None
        self.sampler = Sampler(settings.sampling, history=[t for t in prompt if t >= 0])
        # Whether the engine may pick this sequence's tokens itself (their argmax:
        # PassInput.greedy), so that only token ids cross from a device: greedy, no penalty,
        # no structured output, no logprobs (fixed for the sequence: decided once).
        self.takes_picks = (
            self.sampler.picks_argmax and constraint is None and not settings.logprobs
        )
        shown = (tokenizer.token_id(t) for t in settings.show_tokens)
        self._decoder = StreamDecoder(tokenizer, show=(i for i in shown if i is not None))
        self._stops = [s for s in settings.stop if s]
        self._held = ""  # text withheld because it may begin a stop string
        self._cut: str | None = None  # the stop string that ended the output (what follows
        # it is dropped), None while none has
        # With structured output, where the streamed text is a whole document (see above).
        self._doc = constraint.reader() if constraint is not None and self._stops else None
        self._held_logprobs: list[TokenLogprob] = []
        self.generated: list[int] = []  # sampled tokens, in order
        self._sent_tokens = 0  # generated tokens whose text has been fully sent
        self._text_ends: list[int] = []  # cumulative text length after each generated token
        self._text_len = 0
        self._sent_len = 0
        self._out_text = ""  # sent text not yet put on `events` (see stream chunks above)
        self._out_logprobs: list[TokenLogprob] = []
        self._out_since = 0.0  # when the oldest of it was sampled
        self._t_token = 0.0  # when the last token was sampled
        self._token_gap = float("inf")  # the time between the last two tokens
        self.prompt_cached = 0
        self.prompt_evaluated = 0
        self.drafted_tokens = 0  # speculative decoding: tokens drafted and checked
        self.accepted_tokens = 0  # of those, the ones that were the samples
        self.t_start = time.perf_counter()
        self.t_first: float | None = None
        self.t_sampling = 0.0

    def _truncate(self, prompt: list[int], marks: list[int]) -> tuple[list[int], list[int]]:
        """Keep num_keep inputs and the tail; a same_batch run the cut would split is
        dropped whole, and one that straddles num_keep is an error."""
        if not self.settings.truncate:
            raise PromptTooLongError(
                f"the prompt is {len(prompt)} tokens but the context holds {self.num_ctx}; "
                "raise num_ctx, shorten the prompt, or allow truncation"
            )
        room = self.num_ctx - max(1, min(self.num_ctx // 4, 256))
        keep = min(self.num_keep, room)
        if group_start(marks, keep) != keep:
            raise PromptTooLongError(
                "the prompt must be truncated but num_keep ends inside an image; "
                "change num_keep or shorten the prompt"
            )
        tail = len(prompt) - (room - keep)
        while group_start(marks, tail) != tail:  # the cut is inside a run: drop all of it
            tail = next(i + m for i, m in enumerate(marks) if m and i < tail <= i + m) + 1
        self.truncated = True
        return prompt[:keep] + prompt[tail:], marks[:keep] + marks[tail:]

    # -- the loop drives these -----------------------------------------------------------
    def started(self, cached: int, evaluated: int) -> None:
        """The loop gave the sequence a slot holding `cached` inputs of its prompt; it
        evaluates the other `evaluated`."""
        self.prompt_cached = cached
        self.prompt_evaluated = evaluated

    def drafted(self, count: int, accepted: int) -> None:
        """The loop checked `count` drafted tokens, `accepted` of them were the samples."""
        self.drafted_tokens += count
        self.accepted_tokens += accepted

    def context_shifted(self) -> None:
        """The loop shifted (or re-evaluated) the context to make room."""
        self.shifted = True

    def accept_logits(self, logits: np.ndarray | None, picked: int | None = None) -> int | None:
        """Sample from the logits that follow the last evaluated input, or take the token
        the engine `picked` (`takes_picks`; `logits` None then). Returns the token to
        evaluate next, or None when the sequence has finished."""
        t0 = time.perf_counter()
        if self.t_first is None:
            self.t_first = t0
        if self._t_token:
            self._token_gap = t0 - self._t_token
        self._t_token = t0
        if len(self.generated) >= self.num_predict:  # num_predict 0: the prompt only
            self.finish("length")
            return None
        token = picked if picked is not None else self._sample(logits)  # type: ignore[arg-type]
        self.t_sampling += time.perf_counter() - t0
        if token is None:
            return None
        if self.tokenizer.is_eos(token):
            self.finish("stop")
            return None
        self.sampler.accept(token)
        self.generated.append(token)
        text = self._decoder.feed(token)
        self._text_len += len(text)
        self._text_ends.append(self._text_len)
        # (a picked token: no logprobs were asked for, `takes_picks`)
        lp = self._logprob(logits, token) if logits is not None and self.settings.logprobs else None
        if lp is not None:
            self._held_logprobs.append(lp)
        if self._emit(text):
            self.finish("stop")
            return None
        if self.constraint is not None and self.constraint.complete:
            self.finish("stop")
            return None
        if len(self.generated) >= self.num_predict:
            self.finish("length")
            return None
        return token

    def _sample(self, logits: np.ndarray) -> int | None:
        c = self.constraint
        if c is None:
            return self.sampler.sample(logits)
        token = self.sampler.sample(logits)
        if not c.accepts(token):
            masked = np.where(c.mask(), logits, -np.inf).astype(np.float32)
            if not np.isfinite(masked).any():
                self.fail("structured output reached a state with no valid continuation")
                return None
            token = self.sampler.sample(masked)
        if not self.tokenizer.is_eos(token):
            c.advance(token)
        return token

    def _logprob(self, logits: np.ndarray, token: int) -> TokenLogprob:
        lp = log_softmax(logits)
        k = self.settings.top_logprobs
        top = None
        if k:
            idx = np.argpartition(lp, lp.shape[0] - k)[lp.shape[0] - k :]
            idx = idx[np.argsort(-lp[idx], kind="stable")]
            top = [self._token_entry(int(i), float(lp[i])) for i in idx]
        return self._token_entry(token, float(lp[token]), top)

    def _token_entry(
        self, token: int, logprob: float, top: list[TokenLogprob] | None = None
    ) -> TokenLogprob:
        raw = self.tokenizer.token_bytes(token)
        return TokenLogprob(
            token=raw.decode("utf-8", "replace"), logprob=logprob, bytes=list(raw), top_logprobs=top
        )

    def _emit(self, text: str) -> bool:
        """Send what is safe to send; True when a stop string matched (the output ends there;
        `_cut` names it)."""
        self._held += text
        if not self._stops:
            keep, matched = len(self._held), None
        elif self._doc is None:
            keep, matched = self._plain_cut(self._held)
        else:
            keep, matched = self._document_cut(self._held)
        out = self._held[:keep]
        self._held = "" if matched is not None else self._held[keep:]
        if self._doc is not None:
            self._doc.feed(out)
        if out or matched is not None:
            self._send(out)
        self._cut = matched
        return matched is not None

    def _plain_cut(self, held: str) -> tuple[int, str | None]:
        """(where to cut, the stop string matched): the earliest stop string (the first given
        of those found there), else keep back the longest tail that begins one."""
        found = [(i, n, s) for n, s in enumerate(self._stops) if (i := held.find(s)) >= 0]
        if found:
            cut, _, stop = min(found)
            return cut, stop
        hold = 0
        for s in self._stops:
            for k in range(min(len(s) - 1, len(held)), 0, -1):
                if held.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        return len(held) - hold, None

    def _document_cut(self, held: str) -> tuple[int, str | None]:
        """`_plain_cut` with structured output: only offsets where the text so far is a whole
        document may start a stop string (anywhere else cutting would leave it unparseable)."""
        ends = self._doc.whole_at(held) if self._doc is not None else []
        for p in ends:
            for s in self._stops:
                if held.startswith(s, p):
                    return p, s
        for p in ends:
            rest = held[p:]
            if rest and any(s.startswith(rest) for s in self._stops):
                return p, None  # a stop string may still complete here: hold from p
        return len(held), None

    def _send(self, text: str) -> None:
        self._sent_len += len(text)
        n = self._sent_tokens  # the text ends only grow: resume where the last send stopped
        while n < len(self._text_ends) and self._text_ends[n] <= self._sent_len:
            n += 1
        self._sent_tokens = n
        if not (self._out_text or self._out_logprobs):  # a new chunk starts
            self._out_since = self._t_token or time.perf_counter()
        if self.settings.logprobs:
            done = max(0, len(self._held_logprobs) - (len(self._text_ends) - n))
            self._out_logprobs += self._held_logprobs[:done]
            self._held_logprobs = self._held_logprobs[done:]
        if not (text or self._out_logprobs or self._out_text):
            return
        self._out_text += text
        # Send unless the next token, as far apart as the last two, is still within the
        # interval of the oldest unsent text.
        if self._t_token + self._token_gap - self._out_since >= self.settings.stream_interval:
            self.flush_stream()

    def flush_stream(self) -> None:
        """Put the unsent text (and its logprobs) on `events` as one chunk now."""
        if not (self._out_text or self._out_logprobs):
            return
        logprobs = self._out_logprobs if self.settings.logprobs else None
        self.events.put(CompletionChunk(content=self._out_text, logprobs=logprobs))
        self._out_text, self._out_logprobs = "", []

    def finish(self, reason: str) -> None:
        if self.done:
            return
        if self._cut is None:  # the end is not a stop string: what is held is real output
            if self._emit(self._decoder.flush()):
                reason = "stop"  # the detokenizer's last text completed a stop string
            elif self._held:
                self._send(self._held)
                self._held = ""
        self.flush_stream()
        self.done = True
        now = time.perf_counter()
        first = self.t_first or now
        self.events.put(
            CompletionDone(
                done_reason=reason,
                stop=self._cut,
                prompt_eval_count=self.prompt_evaluated,
                prompt_cached=self.prompt_cached,
                prompt_eval_duration=int((first - self.t_start) * 1e9),
                eval_count=len(self.generated),
                eval_duration=int((now - first) * 1e9),
                truncated=self.truncated,
                shifted=self.shifted,
                drafted=self.drafted_tokens,
                accepted=self.accepted_tokens,
                speculation_off=self.speculation_off,
                context=self.prompt + self.generated[: self._sent_tokens],
            )
        )
        self.events.put(None)

    def fail(self, message: str) -> None:
        if self.done:
            return
        self.done = True
        self.flush_stream()  # what was generated before the failure still arrives
        self.events.put(CompletionError(error=message))
        self.events.put(None)

    @property
    def sent_tokens(self) -> int:
        """How many generated tokens have had all their text sent."""
        return self._sent_tokens

    def embedded(self, vector: list[float], count: int) -> None:
        """An embedding request's result: the pooled vector of its `count` inputs."""
        self.events.put({"embedding": vector, "prompt_eval_count": count})
        self.events.put(None)
        self.done = True
