"""Scripted chat models for tests, notebooks and the offline demo.

None of these call a network. ``ScriptedObserverModel`` is a deterministic,
rule-based stand-in for a real Observer/Reflector: it reads the prompts that
``observer.py`` and ``reflector.py`` build and answers in their exact format,
so the whole OM pipeline can run offline with realistic output.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, Field

from .foundation.log_dates import weekday_name
from .model_calls.language import conversation_language
from .model_calls.observer import EXTRA_VALUES_HEADER, OBSERVER_PROMPT_MARKER
from .model_calls.reflector import COMPRESSION_LEVEL_LABEL, REFLECTOR_PROMPT_MARKER, TARGET_LABEL
from .model_calls.relative_dates import with_absolute_date
from .model_calls.scripted_reflection import condense_log, drop_oldest_lines

__all__ = [
    "OBSERVER_PROMPT_MARKER",
    "REFLECTOR_PROMPT_MARKER",
    "ScriptedAgentModel",
    "ScriptedChatModel",
    "ScriptedLoopingModel",
    "ScriptedObserverModel",
    "looping_reply",
]


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        str(block.get("text", "")) if isinstance(block, dict) else str(block)
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    )


def _estimate(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def _usage(messages: Sequence[BaseMessage], output: str) -> UsageMetadata:
    prompt = sum(_estimate(_text(m)) for m in messages)
    out = _estimate(output)
    return cast(UsageMetadata, {"input_tokens": prompt, "output_tokens": out, "total_tokens": prompt + out})


class _ScriptedBase(BaseChatModel):
    """Shared plumbing: call recording, usage metadata, optional latency, tools ignored."""

    model_name: str = "scripted"
    delay_s: float = 0.0
    temperature: float | None = None
    max_tokens: int | None = None
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    call_kwargs: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "scripted"
        params["ls_model_name"] = self.model_name
        return params

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        raise NotImplementedError

    def _record(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> int:
        self.calls.append(list(messages))
        self.call_kwargs.append(dict(kwargs))
        return len(self.calls) - 1

    def _finish(self, messages: list[BaseMessage], reply: AIMessage) -> ChatResult:
        text = reply.content if isinstance(reply.content, str) else ""
        if reply.usage_metadata is None:
            reply.usage_metadata = _usage(messages, text)
        reply.response_metadata = {
            "model_name": self.model_name,
            "model_provider": "scripted",
            "finish_reason": "stop",
            **(reply.response_metadata or {}),
        }
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = self._record(messages, kwargs)
        if self.delay_s:
            time.sleep(self.delay_s)
        return self._finish(messages, self._reply(messages, index))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = self._record(messages, kwargs)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self._finish(messages, self._reply(messages, index))

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Tools are accepted and ignored (scripted replies decide about tool calls)."""
        return self

    def with_structured_output(
        self, schema: Any, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """Parse the scripted reply as JSON into ``schema`` (a pydantic class, or a dict for anything else)."""

        def parse(message: AIMessage) -> Any:
            raw = message.content if isinstance(message.content, str) else _text(message)
            match = re.search(r"\{.*\}|\[.*\]", raw, re.DOTALL)
            data = json.loads(match.group(0) if match else raw)
            if isinstance(schema, type) and issubclass(schema, BaseModel):
                return schema.model_validate(data)
            return data

        if include_raw:

            def with_raw(message: AIMessage) -> dict[str, Any]:
                try:
                    return {"raw": message, "parsed": parse(message), "parsing_error": None}
                except Exception as exc:
                    return {"raw": message, "parsed": None, "parsing_error": exc}

            return self | RunnableLambda(with_raw)
        return self | RunnableLambda(parse)


Response = str | BaseException | Callable[[list[BaseMessage]], Any] | AIMessage


class ScriptedChatModel(_ScriptedBase):
    """Answers from ``responses`` in order (cycling): strings, ``AIMessage``s, exceptions to raise,
    or callables ``messages -> str | AIMessage``. Every call is recorded in ``.calls`` and the
    call kwargs (bound temperature, max_tokens, ...) in ``.call_kwargs``."""

    model_name: str = "scripted-chat"
    responses: list[Any] = Field(default_factory=lambda: ["ok"])

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        if not self.responses:
            raise RuntimeError("ScriptedChatModel has no responses")
        item = self.responses[index % len(self.responses)]
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item("scripted failure")
        if callable(item) and not isinstance(item, AIMessage):
            item = item(messages)
        if isinstance(item, AIMessage):
            return item.model_copy(deep=True)
        return AIMessage(content=str(item))


# --------------------------------------------------------------------------- Observer / Reflector

_IMPORTANT_WORDS = re.compile(
    r"\d|\b(prefer|prefers|like|likes|love|hate|dislike|allergic|always|never|favou?rite|want|need|must|"
    r"will|promise|plan|planning|deadline|remember|name|named|my|i'm|i am|birthday|budget|monday|tuesday|"
    r"wednesday|thursday|friday|saturday|sunday|tomorrow|yesterday|today|tonight|next|week|month|year|"
    r"january|february|march|april|may|june|july|august|september|october|november|december)\b",
    re.IGNORECASE,
)
_LINE_RE = re.compile(r"^\[(\d{4}-\d{2}-\d{2})(?: [A-Za-z]+)? (\d{2}:\d{2})\] (.*)$")
_BULLET_TIME_RE = re.compile(r"^\s*[*\-•]\s*(🔴|🟡|🟢)?\s*(?:\((\d{2}:\d{2})\))?\s*(.*)$")


def _short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters at a word boundary (never mid-word)."""
    head = text[: limit * 8]  # bounded work on a huge text
    flat = " ".join(head.split())
    if len(flat) <= limit and len(head) == len(text):
        return flat
    cut = flat[: limit - 1]
    if flat[limit - 1: limit] not in ("", " ") and cut.rfind(" ") > 0:
        cut = cut[: cut.rfind(" ")]  # the cut fell inside a word: drop that word
    return cut.rstrip(" ,;:") + "…"


def _section(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return match.group(1) if match else ""


def _requested_slugs(system: str) -> list[str]:
    if EXTRA_VALUES_HEADER not in system:
        return []
    block = system.split(EXTRA_VALUES_HEADER, 1)[1]
    return re.findall(r"^- <([a-z0-9][a-z0-9-]*)>", block, re.MULTILINE)


def _weekday(day: str) -> str:
    try:
        return weekday_name(datetime.strptime(day, "%Y-%m-%d").date())
    except ValueError:
        return "unknown"


class _Entry:
    def __init__(self, day: str, time_: str, speaker: str, text: str) -> None:
        self.day, self.time, self.speaker, self.text = day, time_, speaker, text


def _parse_transcript(transcript: str) -> list[_Entry]:
    entries: list[_Entry] = []
    for line in transcript.splitlines():
        match = _LINE_RE.match(line)
        if match:
            day, time_, rest = match.groups()
            if rest.startswith("User: "):
                entries.append(_Entry(day, time_, "user", rest[6:]))
            elif rest.startswith("Assistant called tool "):
                entries.append(_Entry(day, time_, "tool_call", rest[len("Assistant called tool "):]))
            elif rest.startswith("Assistant: "):
                entries.append(_Entry(day, time_, "assistant", rest[11:]))
            elif rest.startswith("Tool "):
                entries.append(_Entry(day, time_, "tool_result", rest[5:]))
            else:
                entries.append(_Entry(day, time_, "other", rest))
        elif line.startswith("  ") and entries:
            entries[-1].text += " " + line.strip()
    return entries


class ScriptedObserverModel(_ScriptedBase):
    """A deterministic offline Observer and Reflector (recognises prompts by their markers).

    Observer: one bullet per user message (🔴 when it states a preference, commitment,
    number or date, else 🟡) and one 🟢/🟡 "Assistant ..." bullet per assistant turn, under
    per-day Date headers, with the transcript's times, relative dates resolved at the end
    of the line ("(meaning 2026-02-27)", "(planned for 2026-03-13)" on a plan), ✅ on what was
    done, in the conversation's language (English or Japanese). Reflector: dedupes, one Date header per day, every 🔴
    note at every level, the newest 🟡 per day, drops 🟢; higher levels drop 🟡 first, then cut
    older days' notes at their tail ("…", never mid-word), and never return a longer log.
    """

    SCRIPTED_NOTICE: ClassVar[str] = (
        "Using the scripted offline Observer/Reflector (no model API): observations are rule-based "
        "summaries, not LLM output. Pass model='provider:model' for real observations."
    )
    model_name: str = "scripted-om"

    @property
    def _llm_type(self) -> str:
        return "scripted-om"

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        system = next((_text(m) for m in messages if isinstance(m, SystemMessage)), "")
        human = "\n\n".join(_text(m) for m in messages if isinstance(m, HumanMessage))
        if system.startswith(REFLECTOR_PROMPT_MARKER) or REFLECTOR_PROMPT_MARKER in system:
            return AIMessage(content=self.reflect(human, _requested_slugs(system)))
        if OBSERVER_PROMPT_MARKER in system:
            return AIMessage(content=self.observe(human, _requested_slugs(system), "<thread-title>" in system))
        last = _short(human, 80)
        return AIMessage(content=f"(scripted) Noted: {last}")

    # -- observer ---------------------------------------------------------------------------

    def observe(self, prompt: str, slugs: Sequence[str] = (), want_title: bool = False) -> str:
        """Observations for the transcript inside ``prompt``; a multi-thread transcript gets one
        ``=== Thread <label> ===`` section per thread, as the Observer prompt asks."""
        transcript = _section(prompt, "transcript") or prompt
        headers = list(_THREAD_HEADER.finditer(transcript))
        if headers:
            sections = [(m.group(1), transcript[m.end(): nxt.start() if nxt else len(transcript)])
                        for m, nxt in zip(headers, [*headers[1:], None], strict=True)]
        else:
            sections = [(None, transcript)]
        bodies: list[str] = []
        users: list[_Entry] = []
        words = _JAPANESE_WORDS if conversation_language(transcript) == "Japanese" else _ENGLISH_WORDS
        for label, text in sections:
            blocks, section_users = _observe_entries(_parse_transcript(text), words)
            users.extend(section_users)
            body = "\n\n".join(blocks)
            bodies.append(f"=== Thread {label} ===\n{body}" if label else body)
        last_user = _short(users[-1].text, 120) if users else words["continue"]
        out = [
            "<observations>\n" + "\n\n".join(bodies) + "\n</observations>",
            f"<current-task>{words['task']}{last_user}</current-task>",
            f"<suggested-response>{words['suggest']}{last_user}</suggested-response>",
        ]
        if want_title:
            title = " ".join(users[0].text.split()[:6]) if users else "Conversation"
            out.append(f"<thread-title>{_short(title, 60)}</thread-title>")
        for slug in slugs:
            value = f"From {len(users)} user message(s); latest: {_short(users[-1].text, 80)}" if users else "none"
            out.append(f"<{slug}>{value}</{slug}>")
        return "\n".join(out)

    # -- reflector ---------------------------------------------------------------------------

    def reflect(self, prompt: str, slugs: Sequence[str] = ()) -> str:
        """A consolidated log for the log inside ``prompt`` (level and target from the prompt), as a
        model following the Reflector's contract writes it: harder levels until the target is met,
        then whole lines of the oldest days in the prompt's order (🟡 before 🔴, oldest first; the
        newest day stays)."""
        level_match = re.search(rf"{re.escape(COMPRESSION_LEVEL_LABEL)}\s*(\d)", prompt)
        level = int(level_match.group(1)) if level_match else 0
        log = _section(prompt, "observation-log") or prompt
        condensed = condense_log(log, level)
        target_match = re.search(rf"{re.escape(TARGET_LABEL)} under ([\d,]+) tokens", prompt)
        target = int(target_match.group(1).replace(",", "")) if target_match else None
        while target and level < 3 and _estimate(condensed) > target:
            level += 1  # as a model heeding the target would: condense harder
            condensed = condense_log(log, level)
        if target and _estimate(condensed) > target:
            condensed = drop_oldest_lines(condensed, target)
        out = ["<observations>\n" + condensed + "\n</observations>"]
        for slug in slugs:
            out.append(f"<{slug}>Consolidated at level {level}</{slug}>")
        return "\n".join(out)


LOOPING_LINE = "* 🟡 (09:00) User asked again about the weather in Paris."


def looping_reply(line: str = LOOPING_LINE, times: int = 300, *, closed: bool = False) -> str:
    """The reply of a model stuck in a loop: ``line`` ``times`` times after one Date header, cut
    by the output limit (no closing tag) unless ``closed``."""
    body = "<observations>\nDate: 2026-11-30 (Monday)\n" + "\n".join([line] * times)
    return body + "\n</observations>" if closed else body


class ScriptedLoopingModel(ScriptedObserverModel):
    """The scripted Observer/Reflector, stuck in a loop on the calls whose 0-based index (counting
    every call to this model) is in ``loop_on``: those calls return ``loop_text``."""

    model_name: str = "scripted-looping"
    loop_on: list[int] = Field(default_factory=lambda: [0])
    loop_text: str = Field(default_factory=looping_reply)

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        if index in self.loop_on:
            return AIMessage(content=self.loop_text)
        return super()._reply(messages, index)


# --------------------------------------------------------------------------- agent


class ScriptedAgentModel(_ScriptedBase):
    """A tiny deterministic agent model: echoes the last human message, or issues scripted tool calls.

    ``tool_calls_on={call_index: ("tool_name", {args})}`` makes that call (0-based, counting
    every model call) return a tool call instead of text.
    """

    model_name: str = "scripted-agent"
    tool_calls_on: dict[int, tuple[str, dict[str, Any]]] = Field(default_factory=dict)
    reply_prefix: str = "Noted"
    stream_tokens: bool = False
    """Stream a text reply word by word (as a provider streams tokens), so ``stream_mode="messages"``
    and UI adapters see several chunks; off by default, when the reply arrives whole."""
    turns_seen: dict[str, None] = Field(default_factory=dict)
    """User messages shown so far (by id, else text): turns keep counting once OM drops observed ones."""

    def _chunks(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> list[ChatGenerationChunk]:
        result = self._finish(messages, self._reply(messages, self._record(messages, kwargs)))
        reply = cast(AIMessage, result.generations[0].message)
        text = reply.content if isinstance(reply.content, str) else ""
        if reply.tool_calls or not text:
            return [ChatGenerationChunk(message=AIMessageChunk(
                content=reply.content, tool_calls=reply.tool_calls, usage_metadata=reply.usage_metadata,
                response_metadata=reply.response_metadata))]
        words = re.findall(r"\S+\s*|\s+", text)
        chunks = [ChatGenerationChunk(message=AIMessageChunk(content=word)) for word in words]
        chunks[-1] = ChatGenerationChunk(message=AIMessageChunk(
            content=words[-1], usage_metadata=reply.usage_metadata, response_metadata=reply.response_metadata,
            chunk_position="last"))
        return chunks

    def _should_stream(self, *, async_api: bool, run_manager: Any = None, **kwargs: Any) -> bool:
        return self.stream_tokens and super()._should_stream(async_api=async_api, run_manager=run_manager, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages, kwargs):
            if run_manager is not None:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages, kwargs):
            if run_manager is not None:
                await run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk
            await asyncio.sleep(0)

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        for message in (m for m in messages if isinstance(m, HumanMessage)):
            if message.id:  # a prompt template's id-less copy of this turn, now stored under its id
                self.turns_seen.pop("text:" + _text(message), None)
            self.turns_seen.setdefault(message.id or "text:" + _text(message), None)
        if index in self.tool_calls_on:
            name, args = self.tool_calls_on[index]
            return AIMessage(content="", tool_calls=[{"name": name, "args": dict(args), "id": f"call_{index}",
                                                      "type": "tool_call"}])
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"Based on {last.name or 'the tool'}: {_short(_text(last), 100)}")
        human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        said = _short(_text(human), 80) if human is not None else "nothing yet"
        notes = sum(text.count("\n* ") for m in messages if isinstance(m, SystemMessage)
                    for text in [_text(m)] if "<observations>" in text)
        memory = f", {notes} note{'' if notes == 1 else 's'} in memory" if notes else ""
        return AIMessage(content=f"{self.reply_prefix} (turn {len(self.turns_seen)}{memory}): you said \"{said}\".")


def scripted_om_models(**kwargs: Any) -> Mapping[str, ScriptedObserverModel]:
    """One scripted model for both roles (convenience for demos)."""
    model = ScriptedObserverModel(**kwargs)
    return {"observer": model, "reflector": model}


def _has_cjk_detail(text: str) -> bool:
    """Japanese statements of numbers, dates and wishes count as important, as English ones do."""
    return bool(re.search(r"[0-9０-９]|予算|予約|好き|嫌い|アレルギー|したい|予定|締め切り|名前|明日|来週|月|日", text))


_THREAD_HEADER = re.compile(r"^=== Thread (\S+) ===$", re.MULTILINE)


_ENGLISH_WORDS = {"user": "User said: ", "assistant": "Assistant", "tool": "used tool ", "replied": "replied: ",
                  "task": "Respond to the user's latest message: ", "suggest": "Continue by addressing: ",
                  "continue": "continue the conversation", "nothing": "Nothing to observe."}
_JAPANESE_WORDS = {"user": "ユーザー: ", "assistant": "アシスタント", "tool": "ツール使用 ", "replied": "返答: ",
                   "task": "ユーザーの最新のメッセージに応える: ", "suggest": "次に扱うこと: ",
                   "continue": "会話を続ける", "nothing": "記録することなし。"}
"""The scripted Observer's own words, in the conversation's language (only these two here)."""

_DONE = re.compile(
    r"\b(?:booked|bought|paid|finished|completed|submitted|reserved|ordered|signed|sent|cancelled|canceled|"
    r"done|got it done)\b|予約した|予約しました|買った|買いました|払った|払いました|終わった|終わりました|"
    r"完了|済み|済ませ",
    re.IGNORECASE)



def _observe_entries(entries: Sequence[_Entry], words: Mapping[str, str] = _ENGLISH_WORDS
                     ) -> tuple[list[str], list[_Entry]]:
    """Dated blocks of rule-based observations for one thread's transcript entries, in the
    conversation's language: relative dates resolved at the end of the line, ✅ on what was done."""
    days: dict[str, list[str]] = {}
    users = [e for e in entries if e.speaker == "user"]
    pending: list[_Entry] = []

    def flush() -> None:
        if not pending:
            return
        first = pending[0]
        replies = [e.text for e in pending if e.speaker == "assistant"]
        tools = [e.text.split("(", 1)[0] for e in pending if e.speaker == "tool_call"]
        parts: list[str] = []
        if tools:
            parts.append(words["tool"] + ", ".join(dict.fromkeys(tools)))
        if replies:
            parts.append(words["replied"] + _short(replies[-1], 110))
        mark = "🟡" if tools else "🟢"
        days.setdefault(first.day, []).append(f"* {mark} ({first.time}) {words['assistant']} {'; '.join(parts)}")
        pending.clear()

    for entry in entries:
        if entry.speaker == "user":
            flush()
            plain = re.sub(r"\[(?:Image|File) #\d+[^\]]*\]", "", entry.text[:2000])  # the note keeps 160
            mark = "🔴" if _IMPORTANT_WORDS.search(plain) or _has_cjk_detail(plain) else "🟡"
            done = "✅ " if _DONE.search(plain) and not plain.rstrip().endswith(("?", "？")) else ""
            note = with_absolute_date(_short(entry.text, 160), entry.day)
            days.setdefault(entry.day, []).append(f"* {mark} ({entry.time}) {done}{words['user']}{note}")
        elif entry.speaker in ("assistant", "tool_call"):
            pending.append(entry)
    flush()
    if not days:
        days.setdefault(datetime.now().strftime("%Y-%m-%d"), []).append(f"* 🟢 (00:00) {words['nothing']}")
    return [f"Date: {day} ({_weekday(day)})\n" + "\n".join(lines) for day, lines in days.items()], users
