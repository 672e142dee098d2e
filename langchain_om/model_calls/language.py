"""Which language a conversation is held in, as far as OM's prompts need to know.

The Observer and the Reflector are told to write in the conversation's own language; a model
reading mostly English instructions drifts into English notes all the same. So when the text
is clearly written in a script of its own (Japanese, Chinese, Korean, Cyrillic, ...), the
prompt names the language outright. The check is a character count, cheap and deterministic.
Latin-script text is told apart by its most common short words (articles, pronouns,
prepositions): French, Spanish, German, Italian, Portuguese and Dutch are named the same way;
English, the prompts' own language, and text too short or too mixed to tell are not.
"""

from __future__ import annotations

import re

_SCRIPTS: tuple[tuple[str, re.Pattern[str]], ...] = (  # runs of characters: counted by their lengths
    ("Japanese", re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]+")),  # kana: only Japanese uses it
    ("Korean", re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]+")),
    ("Chinese", re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]+")),
    ("Russian", re.compile(r"[\u0400-\u04ff]+")),
    ("Arabic", re.compile(r"[\u0600-\u06ff]+")),
    ("Hebrew", re.compile(r"[\u0590-\u05ff]+")),
    ("Greek", re.compile(r"[\u0370-\u03ff]+")),
    ("Thai", re.compile(r"[\u0e00-\u0e7f]+")),
    ("Hindi", re.compile(r"[\u0900-\u097f]+")),
)
_LETTERS = re.compile(r"[^\W\d_]+")
_ANY_SCRIPT = re.compile("[" + "".join(pattern.pattern[1:-2] for _, pattern in _SCRIPTS) + "]+")  # one class
_LATIN_WORDS: tuple[tuple[str, frozenset[str]], ...] = (  # words frequent in one language, rare in the others
    ("English", frozenset("the and is are you i to of it that what my with for this was have".split())),
    ("French", frozenset("le les et est je vous une des pour pas mon avec nous dans sur ce qui au".split())),
    ("Spanish", frozenset("el los las y es una para por mi con está muy pero yo del como al".split())),
    ("German", frozenset("der die das und ist ich nicht ein eine mit für mein wir auf sie auch zu".split())),
    ("Italian", frozenset("il e è che di per non mi con sono ho della del gli una anche".split())),
    ("Portuguese", frozenset("o os e é não um uma com meu minha eu você para do da em".split())),
    ("Dutch", frozenset("de het een en ik niet van voor met mijn je dat op zijn wij ook".split())),
)
_LATIN_NAMES = tuple(name for name, _ in _LATIN_WORDS)
_LANGUAGES_OF: dict[str, tuple[str, ...]] = {}
for _name, _common in _LATIN_WORDS:
    for _word in _common:
        _LANGUAGES_OF[_word] = (*_LANGUAGES_OF.get(_word, ()), _name)
_LATIN_SAMPLE = 2_000
_WORDS = re.compile(r"[A-Za-z\u00c0-\u024f]+")  # Latin letters, accented ones included
_SAMPLE = 20_000  # characters looked at: enough to tell, bounded work on a huge transcript


def _count(pattern: re.Pattern[str], text: str) -> int:
    """Characters of ``text`` ``pattern`` matches, counted run by run (not one string per character)."""
    return sum(map(len, pattern.findall(text)))


def conversation_language(text: str) -> str | None:
    """The language of ``text`` when its letters are mostly in one non-Latin script, else None.

    Kana decide for Japanese even when kanji outnumber them (Japanese text mixes both)."""
    sample = text[:_SAMPLE]
    # the characters of every script named here, in one pass: each script is counted in them,
    # not in the whole sample (ten passes over a 10k-character transcript cost ~2 ms a call)
    scripts = "".join(_ANY_SCRIPT.findall(sample))
    if not scripts:
        return _latin_language(sample)
    letters = _count(_LETTERS, sample)
    if letters == 0:
        return None
    kana = _count(_SCRIPTS[0][1], scripts)
    han = _count(_SCRIPTS[2][1], scripts)
    if kana and (kana + han) * 4 >= letters:
        return "Japanese"
    for name, pattern in _SCRIPTS[1:]:
        if _count(pattern, scripts) * 2 >= letters:
            return name
    return None


def _latin_language(sample: str) -> str | None:
    """The language of Latin-script text by its common words, when one clearly leads (at least
    four hits and half again as many as the runner-up); English and unclear text give None.
    The first ``_LATIN_SAMPLE`` characters are enough to tell, and cost ~0.1 ms."""
    scores = dict.fromkeys(_LATIN_NAMES, 0)
    for word in _WORDS.findall(sample[:_LATIN_SAMPLE]):
        for name in _LANGUAGES_OF.get(word.lower(), ()):
            scores[name] += 1
    ranked = sorted(((score, name) for name, score in scores.items()), reverse=True)
    (best, name), (second, _) = ranked[0], ranked[1]
    if best < 4 or best * 2 < second * 3 or name == "English":
        return None
    return name


def language_line(text: str, *, what: str) -> str | None:
    """The prompt sentence naming the language ``what`` (the notes, the log) must be written in."""
    language = conversation_language(text)
    if language is None:
        return None
    return (f"This conversation is held in {language}: write {what} in {language}, as the conversation "
            "does. Keep names exactly as written. Keep these exactly as shown, whatever the language: the "
            "word \"Date:\", the marks, every date as YYYY-MM-DD, and the suffixes \"(meaning YYYY-MM-DD)\" "
            "and \"(planned for YYYY-MM-DD)\".")
