"""The ``langchain-om`` console script: ``demo``, ``inspect``, ``threads``, ``serve`` and ``eval longmemeval``.

Plain argparse with ``main(argv) -> exit code`` so tests can drive it in-process.
Heavy imports happen inside the subcommands, keeping ``--help`` fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, Literal, NoReturn

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..foundation.extras import MissingExtraError
from ..store.base import StoreError
from .db import check_db_path
from .forks import add_fork_arguments, branch_ids, fork_target
from .literal import json_text, literal
from .serve import add_serve_parser, cmd_serve
from .threads import add_threads_parser, closest_thread_ids, cmd_threads

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def _default_db() -> str:
    from ..store import DB_ENV, DEFAULT_DB_PATH

    return os.environ.get(DB_ENV) or DEFAULT_DB_PATH


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _identifier(option: str) -> Callable[[str], str]:
    """An argparse type refusing an empty or blank id, naming the option it came from."""

    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        return text

    check.__name__ = option  # argparse names the type in its message
    return check


def _version() -> str:
    try:
        return metadata.version("langchain-om")
    except metadata.PackageNotFoundError:  # running from a checkout without an install
        from .. import __version__

        return __version__


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's own error rule: a usage error is one line starting ``error:`` (naming the
    argument, as argparse's message does) plus where the options are listed, instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {' '.join(message.split())} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="langchain-om",
        description="Observational Memory for LangGraph/LangChain: demo, inspection and evaluation.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command")  # no command given: main prints the help

    demo = sub.add_parser(
        "demo", help="replay a bundled multi-day conversation through OM and watch both windows",
        description="Replay a conversation step by step through Observational Memory on a SQLite file and print "
                    "both windows after every step: the bundled six-day trip planning (152 messages; --lang ja, a "
                    "Japanese one), or your own JSON file with --conversation (replayed on a thread of its own "
                    "unless --thread is given). Offline with the scripted Observer/Reflector unless --model or an "
                    "API key is set. A rerun on the same --db and thread continues where the last one stopped.")
    demo.add_argument("--db", type=_identifier("--db"), default=None,
                      help="SQLite file (default: $LANGCHAIN_OM_DB or ./langchain_om.db)")
    demo.add_argument("--model", default=None,
                      help="Observer/Reflector model, any init_chat_model string (openai:gpt-5-mini, "
                           "openai/gpt-5-mini). Default: scripted offline model unless an API key is set")
    demo.add_argument("--thread", type=_identifier("--thread"), default=None,
                      help="thread id (default: demo-trip; with --conversation, a thread named after the file)")
    demo.add_argument("--message-tokens", type=_positive_int, default=None,
                      help="observation threshold of the message window (default: 1200)")
    demo.add_argument("--observation-tokens", type=_positive_int, default=None,
                      help="reflection threshold of the observation log (default: 1500)")
    demo.add_argument("--fast", action="store_true",
                      help="no per-step lines or pauses, only the bar and the summary")
    demo.add_argument("--steps", type=_positive_int, default=None,
                      help="replay at most N steps this run (a later run continues the thread)")
    demo.add_argument("--scripted", action="store_true", help="force the scripted offline model even with API keys")
    demo.add_argument("--conversation", default=None,
                      help="replay this JSON file (a list of {role, content, timestamp, ...}) instead of the "
                           "bundled one, on a thread of its own unless --thread is given")
    demo.add_argument("--lang", choices=("en", "ja"), default=None,
                      help="which bundled conversation to replay: en (default) or ja, a Japanese one "
                           "(its default thread is demo-trip-ja)")

    inspect = sub.add_parser("inspect", help="print a thread's OM record and windows")
    inspect.add_argument("thread_id", type=_identifier("thread_id"))
    inspect.add_argument("--db", type=_identifier("--db"), default=None,
                         help="SQLite file (default: $LANGCHAIN_OM_DB or ./langchain_om.db)")
    inspect.add_argument("--resource", type=_identifier("--resource"), default=None,
                         help="resource id (default: none, the thread's private resource)")
    inspect.add_argument("--json", action="store_true", help="print the record and status as JSON (snake_case keys)")
    inspect.add_argument("--message-tokens", type=_positive_int, default=None,
                         help="threshold to report the message window against (default: what the writer recorded, "
                              "else 30000)")
    inspect.add_argument("--observation-tokens", type=_positive_int, default=None,
                         help="threshold to report the observation window against (default: recorded, else 40000)")

    add_threads_parser(sub, _identifier, _positive_int,
                       "SQLite file (default: $LANGCHAIN_OM_DB or ./langchain_om.db)")

    add_fork_arguments(inspect, _identifier)

    add_serve_parser(sub, _identifier, _positive_int, "SQLite file (default: $LANGCHAIN_OM_DB or ./langchain_om.db)")

    evaluate = sub.add_parser("eval", help="benchmarks against public datasets")
    eval_sub = evaluate.add_subparsers(dest="benchmark", required=True)
    lme = eval_sub.add_parser(
        "longmemeval", help="run a LongMemEval-format JSON file through OM",
        description="Ingest each question's haystack through OM, answer from OM's context, judge, print accuracy "
                    "per question type. '--model scripted' runs offline (no API key; the scores only show the "
                    "mechanics).")
    lme.add_argument("--data", required=True, help="LongMemEval JSON (e.g. longmemeval_s.json)")
    _add_run_arguments(lme, unit="questions", out="longmemeval_results.jsonl", concurrency=4)
    lme.add_argument("--judge-model", default=None,
                     help="judge model (default: the answer model; the scripted judge with --model scripted)")
    lme.add_argument("--question-type", action="append", default=None,
                     help="only questions of this type (repeatable; default: every type)")
    add_price_arguments(lme)

    locomo = eval_sub.add_parser(
        "locomo", help="run LoCoMo's locomo10.json (your own copy) through OM",
        description="Replay each conversation through OM, answer its questions from OM's context, print LoCoMo's "
                    "token F1 per category (adversarial questions apart). '--model scripted' runs offline.")
    locomo.add_argument("--data", required=True, help="LoCoMo JSON (data/locomo10.json of snap-research/LoCoMo)")
    _add_run_arguments(locomo, unit="conversations", out="locomo_results.jsonl", concurrency=2)
    locomo.add_argument("--category", type=int, action="append", default=None,
                        help="only questions of this category: 1 multi-hop, 2 temporal, 3 open-domain, "
                             "4 single-hop, 5 adversarial (repeatable; default: every category)")
    add_price_arguments(locomo)
    return parser


def _add_run_arguments(parser: argparse.ArgumentParser, *, unit: str, out: str, concurrency: int) -> None:
    """What every ``eval`` benchmark takes: the models, the results file it resumes from, how many
    ``unit`` (questions, conversations) run at once and how many new ones, OM's state and thresholds."""
    parser.add_argument("--model", required=True,
                        help="model answering the questions: an init_chat_model string, or 'scripted' (offline)")
    parser.add_argument("--om-model", default=None,
                        help="Observer/Reflector model, or 'scripted' (default: the answer model)")
    parser.add_argument("--out", default=out,
                        help=f"results JSONL; {unit} already in it are skipped (resume) (default: %(default)s)")
    parser.add_argument("--concurrency", type=_positive_int, default=concurrency,
                        help=f"{unit} processed at once (default: %(default)s)")
    parser.add_argument("--limit", type=_positive_int, default=None,
                        help=f"process at most N new {unit} (default: all)")
    parser.add_argument("--db", type=_identifier("--db"), default=None,
                        help="SQLite file for OM state (default: <out>.om.db)")
    parser.add_argument("--message-tokens", type=_positive_int, default=None,
                        help="OM message threshold (default: 30000)")
    parser.add_argument("--observation-tokens", type=_positive_int, default=None,
                        help="OM reflection threshold (default: 40000)")


def add_price_arguments(parser: argparse.ArgumentParser) -> None:
    """``--price`` / ``--prices``: what each role's tokens cost, for the cost and its projection."""
    parser.add_argument("--price", action="append", default=[], metavar="MODEL_OR_ROLE=IN,OUT",
                        help="dollars per million input and output tokens for a model string, a role "
                             "(observer, reflector, answer, judge) or '*' (repeatable), e.g. "
                             "'observer=0.10,0.40'; the summary then shows the cost and projects it for the "
                             "whole file")
    parser.add_argument("--prices", action="append", default=[], metavar="FILE",
                        help='JSON price table {"MODEL_OR_ROLE": {"input": X, "output": Y}} (repeatable; '
                             "--price entries win)")


def _error(message: str) -> int:
    """One line on stderr, never wrapped, and the error exit code. The message often quotes stored text
    or an argument (a thread id): it is printed literally, never read as markup or sent raw."""
    Console(stderr=True, soft_wrap=True).print(Text.assemble(("error:", "red"), " ", literal(message)))
    return EXIT_ERROR


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


_EVAL_FLAGS = {"model": "--model", "judge_model": "--judge-model", "om_model": "--om-model",
               "question_type": "--question-type", "concurrency": "--concurrency", "limit": "--limit",
               "data": "--data", "message_tokens": "--message-tokens", "observation_tokens": "--observation-tokens",
               "price": "--price", "prices": "--prices", "category": "--category"}
"""The harness's field names (``EvalSettings``) and the flags that set them."""


def _as_flag(message: str, flags: dict[str, str]) -> str:
    """``model: ...`` -> ``--model: ...``: an error from the library, named the way the user typed it."""
    field, sep, rest = message.partition(": ")
    return f"{flags[field]}: {rest}" if sep and field in flags else message


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code.

    Every failure ends in one line on stderr and exit code 1 (2 for usage errors);
    ``LANGCHAIN_OM_TRACEBACK=1`` shows the traceback of an unexpected one.
    """
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.command is None:  # `langchain-om` alone: what it can do, not an error about a missing argument
        parser.print_help()
        return EXIT_OK
    console = Console()
    try:
        if args.command == "demo":
            return _cmd_demo(args, console)
        if args.command == "inspect":
            db = args.db or _default_db()
            check_db_path(db, must_exist=True, writable=False)
            return asyncio.run(_cmd_inspect(args, db, console))
        if args.command == "threads":
            db = args.db or _default_db()
            check_db_path(db, must_exist=True, writable=False)
            return asyncio.run(cmd_threads(args, db, console))
        if args.command == "serve":
            db = args.db or _default_db()
            check_db_path(db, must_exist=True, writable=False)
            return cmd_serve(args, db, console)
        if args.command == "eval" and args.benchmark == "longmemeval":
            try:
                return _cmd_longmemeval(args, console)
            except ValueError as exc:  # the harness names EvalSettings fields; the user typed flags
                return _error(_as_flag(_one_line(exc), _EVAL_FLAGS))
        if args.command == "eval" and args.benchmark == "locomo":
            try:
                return _cmd_locomo(args, console)
            except ValueError as exc:
                return _error(_as_flag(_one_line(exc), _EVAL_FLAGS))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130
    except (ValueError, OSError, StoreError) as exc:  # config, data, path and store errors name their field
        return _error(_one_line(exc))
    except MissingExtraError as exc:  # e.g. serve without the [ui] extra: the extra to install, in one line
        return _error(_one_line(exc))
    except Exception as exc:  # a model provider's error (no API key, unknown model): one line, not a traceback
        if os.environ.get("LANGCHAIN_OM_TRACEBACK"):
            raise
        return _error(f"{type(exc).__name__}: {_one_line(exc)} (LANGCHAIN_OM_TRACEBACK=1 shows the traceback)")
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE  # pragma: no cover - parser.error exits


# ----------------------------------------------------------------------- demo


def _cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from .demo import (
        DEFAULT_MESSAGE_TOKENS,
        DEFAULT_OBSERVATION_TOKENS,
        DEFAULT_THREAD,
        DemoDataError,
        DemoModelError,
        bundled_conversation_path,
        conversation_thread_id,
        load_conversation,
        run_demo,
    )

    if args.lang is not None and args.conversation is not None:
        return _error("--lang picks a bundled conversation and --conversation replays a file: pass one of them")
    if args.conversation is not None:
        try:  # checked before --db is touched, so a bad file leaves no empty thread behind
            load_conversation(args.conversation)
        except DemoDataError as exc:
            return _error(f"--conversation: {_one_line(exc)}")
    db = args.db or _default_db()
    check_db_path(db, must_exist=False, writable=True)
    conversation, default_thread = args.conversation, DEFAULT_THREAD
    if args.lang is not None:  # a bundled conversation by language; its own thread, so replays never mix
        conversation = None if args.lang == "en" else str(bundled_conversation_path(args.lang))
        default_thread = DEFAULT_THREAD if args.lang == "en" else f"{DEFAULT_THREAD}-{args.lang}"
    elif conversation is not None:  # a file of the user's: a thread of its own, never the bundled demo's
        default_thread = conversation_thread_id(conversation)
    try:
        run_demo(
            db=db,
            model=args.model,
            thread_id=args.thread if args.thread is not None else default_thread,
            message_tokens=args.message_tokens or DEFAULT_MESSAGE_TOKENS,
            observation_tokens=args.observation_tokens or DEFAULT_OBSERVATION_TOKENS,
            fast=args.fast,
            max_steps=args.steps,
            scripted=args.scripted,
            conversation=conversation,
            console=console,
        )
    except DemoModelError as exc:  # one line, non-zero exit; the stored steps stay for a rerun
        hint = "" if args.scripted else "; or add --scripted to run the offline Observer/Reflector instead"
        return _error(f"{exc}{hint}")
    return EXIT_OK


# -------------------------------------------------------------------- inspect


def _spend_line(spend: dict[str, Any] | None) -> str:
    """``observer: 12 calls, 40,120 in / 3,020 out tokens; reflector: ...`` (running totals of the record)."""
    if not spend:
        return "none yet"
    parts = []
    for role, totals in spend.items():
        text = (f"{role}: {int(totals.get('calls', 0))} calls, {int(totals.get('input_tokens', 0)):,} in / "
                f"{int(totals.get('output_tokens', 0)):,} out tokens")
        if totals.get("cost") is not None:
            text += f", cost {float(totals['cost']):.4f}"
        parts.append(text)
    return "; ".join(parts)


async def _cmd_inspect(args: argparse.Namespace, db: str, console: Console) -> int:
    from ..engine import ObservationalMemory
    from ..store.base import implicit_resource
    from ..store.sqlite import SQLiteStore
    from .demo import THRESHOLDS_KEY

    resource = args.resource or implicit_resource(args.thread_id)
    store = SQLiteStore(db)
    await store.asetup()
    try:
        thread = await store.aget_thread(resource, args.thread_id)
        if thread is None:
            owner = f"resource {args.resource!r}" if args.resource else "a thread without a resource"
            near = await closest_thread_ids(store, args.resource, args.thread_id)
            hint = f"; did you mean {', '.join(repr(i) for i in near)}?" if near else \
                "; `langchain-om threads` lists them"
            return _error(f"thread_id: thread {args.thread_id!r} not found for {owner} in {db}{hint}")
        scope: Literal["thread", "resource"] = "thread"
        record = await store.aget_record(resource, args.thread_id)
        if record is None and await store.aget_record(resource, None) is not None:
            scope = "resource"
        thresholds = thread.metadata.get(THRESHOLDS_KEY) or {}
        observation = {"message_tokens": int(args.message_tokens or thresholds.get("message_tokens") or 30_000)}
        reflection = {"observation_tokens": int(args.observation_tokens or thresholds.get("observation_tokens")
                                                or 40_000)}
        om = ObservationalMemory(store, scope=scope, observation=observation, reflection=reflection)
        target = await fork_target(args, store, resource, db)  # the thread, one of its forks, or a checkpoint's
        if target.position is not None:
            record = await om.aget_record(args.thread_id, resource_id=args.resource, checkpoint=target.position)
            status = await om.astatus(args.thread_id, resource_id=args.resource, checkpoint=target.position)
        else:
            record = await om.aget_record(target.thread, resource_id=args.resource)
            status = await om.astatus(target.thread, resource_id=args.resource)
        total = await store.acount_messages(resource, target.thread)
        last = await _last_observed(store, record, resource, target.thread)
        forks = await branch_ids(store, resource, args.thread_id)
        if args.json:  # snake_case throughout, like the Python models (the status event's wire shape is camelCase)
            payload: dict[str, Any] = {
                "thread": thread.model_dump(mode="json"),
                "record": record.model_dump(mode="json"),
                "status": status.model_dump(mode="json"),
                "stored_messages": total,
                "last_observed_message": last,
                "branches": forks,
                "shown": {"branch": target.thread.split("branch:", 1)[1] if target.thread != args.thread_id else None,
                          "checkpoint": args.checkpoint},
            }
            sys.stdout.write(json_text(payload) + "\n")
            return EXIT_OK
        _print_inspection(console, thread, record, status, total, scope, last)
        _print_forks(console, args, target.thread, forks)
        return EXIT_OK
    finally:
        await store.aclose()


async def _last_observed(store: Any, record: Any, resource: str, thread_id: str) -> dict[str, Any] | None:
    """The newest observed message of the thread: id, seq and when it was sent (on its own clock, as the
    observation log and ``recall`` show it), rather than the time of the step that observed it."""
    from ..extensions.recall import message_stamp

    seq = record.last_observed_seq.get(thread_id)
    if seq is None:
        return None
    messages = await store.aget_messages(resource, thread_id)
    message = next((m for m in messages if m.seq == seq), None)
    if message is None:
        return {"id": None, "seq": seq, "sent": None}
    return {"id": message.id, "seq": seq, "sent": message_stamp(message)}


def _print_inspection(console: Console, thread: Any, record: Any, status: Any, total: int, scope: str,
                      last: dict[str, Any] | None) -> None:
    active = status.windows.active
    buffered = status.windows.buffered
    head = Table(title=literal(f"Thread {thread.thread_id} (resource {thread.resource_id})"), show_header=False)

    def row(name: str, value: object) -> None:
        head.add_row(name, literal(value))  # ids, titles and the hints are stored text: never markup

    row("title", thread.title or "-")
    row("scope", scope)
    row("record", f"{record.id} (version {record.version})")
    row("generation", record.generation_count)
    row("stored messages", total)
    row("last observed message",
        f"{last['id']} (seq {last['seq']}), sent {last['sent']}" if last else "- (nothing observed yet)")
    row("messages window", f"{active.messages.tokens} / {active.messages.threshold} tokens")
    row("observations window", f"{active.observations.tokens} / {active.observations.threshold} tokens")
    row("buffered observations",
        f"{buffered.observations.chunks} chunk(s), {buffered.observations.message_tokens} message tokens, "
        f"{buffered.observations.observation_tokens} observation tokens ({buffered.observations.status})")
    row("buffered reflection",
        f"{buffered.reflection.input_observation_tokens} -> {buffered.reflection.observation_tokens} tokens "
        f"({buffered.reflection.status})")
    row("tokenizer", status.tokenizer)
    row("OM model spend", _spend_line(status.spend))
    row("current task", record.current_task or "-")
    row("suggested response", record.suggested_response or "-")
    console.print(head)

    groups = Table(title=f"Observation groups ({len(record.groups)})")
    for column in ("#", "range (message ids)", "source", "gen", "tokens", "created"):
        groups.add_column(column)
    for index, group in enumerate(record.groups, 1):
        groups.add_row(str(index), literal(f"{group.start_id} .. {group.end_id}"), literal(group.source),
                       str(group.generation), str(group.tokens), group.created_at.strftime("%Y-%m-%d %H:%M UTC"))
    console.print(groups)
    if record.buffered_chunks:
        chunks = Table(title="Buffered chunks (waiting for activation)")
        for column in ("seq range", "messages", "message tokens", "observation tokens"):
            chunks.add_column(column)
        for chunk in record.buffered_chunks:
            chunks.add_row(f"{chunk.start_seq}-{chunk.end_seq}", str(chunk.message_count), str(chunk.message_tokens),
                           str(chunk.observation_tokens))
        console.print(chunks)
    metadata = {k: v for k, v in record.metadata.items() if k not in ("current_task", "suggested_response")}
    if metadata:
        console.print("[bold]metadata[/bold]")
        console.print(literal(json.dumps(metadata, default=str, ensure_ascii=False, indent=2), keep_lines=True))
    console.print("[bold]Observation log[/bold]")
    console.print(literal(record.observations or "(empty)", keep_lines=True))


def _print_forks(console: Console, args: argparse.Namespace, shown: str, forks: list[str]) -> None:
    if shown != args.thread_id:
        what = f"checkpoint {args.checkpoint}" if args.checkpoint else f"fork {args.branch}"
        console.print(literal(f"Shown: the memory of {what} (a time-travel branch of {args.thread_id})."))
    if forks:
        console.print(literal(f"Forks of this thread (inspect one with --branch ID): {', '.join(forks)}"))


# --------------------------------------------------------------- longmemeval


def _cmd_longmemeval(args: argparse.Namespace, console: Console) -> int:
    from ..eval.longmemeval import EvalSettings, run_longmemeval

    out_dir = os.path.dirname(os.path.abspath(os.path.expanduser(args.out)))
    if not os.path.isdir(out_dir):
        raise ValueError(f"--out: directory {out_dir} does not exist (create it first)")
    check_db_path(args.db or f"{args.out}.om.db", must_exist=False, writable=True)
    settings = EvalSettings(
        data=args.data,
        model=args.model,
        judge_model=args.judge_model,
        om_model=args.om_model,
        out=args.out,
        concurrency=args.concurrency,
        limit=args.limit,
        db=args.db,
        question_types=args.question_type,
        message_tokens=args.message_tokens,
        observation_tokens=args.observation_tokens,
        prices=args.price,
        price_files=args.prices,
    )
    summary = run_longmemeval(settings, console=console)
    return EXIT_OK if summary.errors == 0 else EXIT_ERROR


def _cmd_locomo(args: argparse.Namespace, console: Console) -> int:
    from ..eval.locomo import LoCoMoSettings, run_locomo

    out_dir = os.path.dirname(os.path.abspath(os.path.expanduser(args.out)))
    if not os.path.isdir(out_dir):
        raise ValueError(f"--out: directory {out_dir} does not exist (create it first)")
    check_db_path(args.db or f"{args.out}.om.db", must_exist=False, writable=True)
    settings = LoCoMoSettings(data=args.data, model=args.model, om_model=args.om_model, out=args.out,
                              concurrency=args.concurrency, limit=args.limit, db=args.db, categories=args.category,
                              message_tokens=args.message_tokens, observation_tokens=args.observation_tokens,
                              prices=args.price, price_files=args.prices)
    summary = run_locomo(settings, console=console)
    return EXIT_OK if not summary.errors else EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
