"""Prompts of the LongMemEval harness: the answering instruction and the yes/no judge.

The judge sees the question, the reference answer and the response inside tags,
gets rules specific to the question type, and must reply with one word. The
rules encode how LongMemEval is usually graded (an off-by-one in day counts is
tolerated for temporal questions, the latest value wins for knowledge updates,
abstention questions are correct only when the response declines), but the
wording here is this project's own.
"""

from __future__ import annotations

import re

ANSWER_INSTRUCTIONS = """\
You are a personal assistant answering a question from a user you have talked with many times before. \
Everything you know about those earlier conversations is in your memory below (dated observations and \
any recent messages); the memory states today's date.

Answer the user's question from that memory:
- Be direct: give the answer first, in one or two sentences. Add a short reason only when it helps \
(for example, how you counted days or which of two values is the latest).
- Dates and durations: compute them from the dates in your memory and today's date.
- When a fact changed over time, answer with the most recent value.
- When the question asks for a recommendation or suggestion, tailor it to the user's stated \
preferences and circumstances.
- If your memory does not contain the information needed, say plainly that you don't know or that it \
was never mentioned. Do not guess."""

LOCOMO_ANSWER_INSTRUCTIONS = """\
You answer questions about a long chat conversation between two people. \
Everything you know about that conversation is in your memory below (dated observations and any recent \
messages); the memory states today's date.

Answer the question from that memory:
- Reply with the answer alone, as a short phrase (a name, a date, a place, a few words), not a sentence.
- Dates: give the date the event happened (for example 7 May 2023), computed from the dates in your memory \
when the conversation said "yesterday" or "last week".
- When the question asks for several things, list them separated by commas.
- If your memory does not contain the answer, reply exactly: Not mentioned in the conversation."""

JUDGE_SYSTEM = """\
You grade answers of a chat assistant for a long-term memory benchmark. You compare the assistant's \
response with a reference answer and decide whether the response is correct. Reply with exactly one \
word: yes or no."""

_TYPE_RULES: dict[str, str] = {
    "temporal-reasoning": (
        "This question needs reasoning about dates or durations. Count the response as correct if it reaches "
        "the reference answer; for a number of days, weeks or months, an answer off by one (e.g. 18 vs 19 "
        "days) still counts as correct, because inclusive and exclusive counting both are reasonable."
    ),
    "knowledge-update": (
        "The user's information changed over time and the reference answer is the latest value. Count the "
        "response as correct if it gives that latest value, even if it also mentions older values, as long "
        "as it presents the latest one as current."
    ),
    "single-session-preference": (
        "The reference describes what a good, personalised response should take into account (a rubric), "
        "not an exact answer. Count the response as correct if it uses the user's relevant preferences or "
        "circumstances the way the rubric describes; it need not mention every point."
    ),
}
_DEFAULT_RULE = (
    "Count the response as correct if it contains the reference answer or something equivalent to it "
    "(same meaning, different wording, or a superset that does not contradict it). Count it as incorrect "
    "if it gives a different answer, only part of a multi-part answer, or says it does not know."
)
_ABSTENTION_RULE = (
    "This is an unanswerable question: the conversations never contained the information asked for, and "
    "the reference explains what is missing. Count the response as correct only if it declines to answer "
    "or says the information is unknown or was not mentioned. A response that answers with a specific "
    "(invented) fact is incorrect."
)

JUDGE_TEMPLATE = """\
{rule}

<question>
{question}
</question>

<reference-answer>
{answer}
</reference-answer>

<response>
{response}
</response>

Is the response correct? Reply with one word: yes or no."""


def is_abstention(question_id: str) -> bool:
    """LongMemEval marks unanswerable questions with an ``_abs`` suffix on the question id."""
    return question_id.endswith("_abs")


def judge_rule(question_type: str, *, abstention: bool) -> str:
    if abstention:
        return _ABSTENTION_RULE
    return _TYPE_RULES.get(question_type, _DEFAULT_RULE)


def judge_prompt(*, question: str, answer: str, response: str, question_type: str, abstention: bool) -> str:
    """The judge's user message for one question."""
    return JUDGE_TEMPLATE.format(rule=judge_rule(question_type, abstention=abstention), question=question.strip(),
                                 answer=answer.strip(), response=response.strip() or "(empty response)")


_VERDICT_RE = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True/False from the judge's reply (first yes/no word); None when it gave neither."""
    match = _VERDICT_RE.search(text or "")
    if match is None:
        return None
    return match.group(1).lower() == "yes"
