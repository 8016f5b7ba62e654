"""What the index stores for one session: its ``entries`` row and its words' counts for ``postings``.

Both the writer (an incremental pass, which may merge several transcripts of one session) and the
readers (a full build, where a transcript is read whole and its entry is built beside it, off the
writer) call these, so the two paths store the same rows. No database here.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from connectcore.history import (
    TERM_MAX_CHARS,
    TITLE_RANK,
    Field,
    Harness,
    SessionEntry,
    TranscriptFacts,
    build_entry,
    field_texts,
    tokens,
)

PROMPT_SEP = "\n\x1e\n"

#: The fields before prompts, in ``Field`` order (their counts are the first columns of a posting).
OTHER_FIELDS = tuple(f for f in Field if f is not Field.PROMPTS)
#: ``entries`` columns that describe the session (the lengths ``n_*`` and texts ``f_*`` follow).
ENTRY_COLUMNS = (
    "harness",
    "session_id",
    "repo",
    "cwd",
    "title",
    "branches",
    "prs",
    "started",
    "last_active",
    "entrypoint",
    "parent_session_id",
    "resume_argv",
    "source_path",
    "source_missing",
)
LENGTH_COLUMNS = tuple(f"n_{f.value}" for f in Field)
TEXT_COLUMNS = tuple(f"f_{f.value}" for f in Field)
#: Every column an entry's row sets, in the order :func:`entry_values` gives them.
ROW_COLUMNS = (*ENTRY_COLUMNS, *LENGTH_COLUMNS, *TEXT_COLUMNS)


def encode_prompts(prompts: Sequence[str]) -> str:
    return PROMPT_SEP.join(p.replace("\x1e", " ") for p in prompts)


def decode_prompts(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.split(PROMPT_SEP) if p) if text else ()


def assemble(
    facts: Sequence[TranscriptFacts],
    *,
    missing: bool,
    codex_title: str | None,
    resolve: Callable[[str], str | None],
    previous_repo: Callable[[], str | None],
) -> SessionEntry:
    """One session's entry from the facts of its transcripts (in ``files`` order).

    ``codex_title``: the session's row in Codex's ``session_index.jsonl``; ``resolve``: a directory's
    repository (None when it cannot tell); ``previous_repo``: the repo the entry had, asked only then.
    """
    title_override = None
    if facts[0].harness is Harness.CODEX and codex_title is not None:
        title_override = (codex_title, TITLE_RANK["thread-name"])
    cwd = next((f.cwd for f in facts if f.cwd), "")
    repo = resolve(cwd) if cwd else None
    if repo is None:
        repo = previous_repo() or cwd
    return build_entry(facts, repo, source_missing=missing, title_override=title_override)


def stored_texts(entry: SessionEntry) -> tuple[dict[Field, str], dict[Field, str]]:
    """The entry's searchable texts, and the same as stored (the prompts separated so they split back)."""
    texts = field_texts(entry)
    stored = dict(texts)
    stored[Field.PROMPTS] = encode_prompts(entry.prompts)
    return texts, stored


def entry_values(entry: SessionEntry, lengths: Mapping[Field, int], stored: Mapping[Field, str]) -> list[Any]:
    """The row's values in ``ROW_COLUMNS`` order."""
    values: list[Any] = [
        entry.harness.value,
        entry.session_id,
        entry.repo,
        entry.cwd,
        entry.title,
        json.dumps(list(entry.branches)),
        json.dumps(list(entry.prs)),
        entry.started,
        entry.last_active,
        entry.entrypoint.value,
        entry.parent_session_id,
        json.dumps(list(entry.resume_argv)) if entry.resume_argv is not None else None,
        entry.source_path,
        int(entry.source_missing),
    ]
    values += [lengths[f] for f in Field]
    values += [stored[f] for f in Field]
    return values


def prompt_term_counts(text: str) -> tuple[int, bytes]:
    """The prompts field's length in words and its searchable words' counts (JSON, for the index).

    Words longer than ``TERM_MAX_CHARS`` are never a query term, so they get no posting.
    """
    words = tokens(text)
    return len(words), orjson.dumps({w: c for w, c in Counter(words).items() if len(w) <= TERM_MAX_CHARS})


def other_fields(texts: Mapping[Field, str]) -> tuple[dict[Field, int], bytes]:
    """Lengths of the fields before prompts, and their words' counts per field (JSON arrays)."""
    lengths: dict[Field, int] = {}
    tf: dict[str, list[int]] = {}
    for i, f in enumerate(OTHER_FIELDS):
        words = tokens(texts[f])
        lengths[f] = len(words)
        for w, c in Counter(words).items():
            if len(w) > TERM_MAX_CHARS:
                continue
            v = tf.get(w)
            if v is None:
                v = tf[w] = [0] * len(OTHER_FIELDS)
            v[i] = c
    return lengths, orjson.dumps(tf)


#: Postings inverted: word -> {document (as text, a JSON key): counts}, documents in increasing order.
#: Counts are a number for a word found in the prompts alone (most words), else the counts in every
#: field, in ``Field`` order (what a full build's ``connectd.history.schema.BULK_POSTINGS`` reads).
Inverted = defaultdict[str, dict[str, int | list[int]]]


def inverted() -> Inverted:
    return defaultdict(dict)


def add_postings(texts: Mapping[Field, str], doc: str, words: Inverted) -> dict[Field, int]:
    """Add document ``doc``'s words to ``words``; returns every field's length in words."""
    prompt_words = tokens(texts[Field.PROMPTS])
    lengths = {Field.PROMPTS: len(prompt_words)}
    counts = Counter(prompt_words)
    if counts and max(map(len, counts)) > TERM_MAX_CHARS:  # rare: filter only then
        counts = Counter({w: c for w, c in counts.items() if len(w) <= TERM_MAX_CHARS})
    for w, c in counts.items():
        words[w][doc] = c
    last = len(OTHER_FIELDS)
    for i, f in enumerate(OTHER_FIELDS):
        found = tokens(texts[f])
        lengths[f] = len(found)
        for w, c in Counter(found).items():
            if len(w) > TERM_MAX_CHARS:
                continue
            docs = words[w]
            v = docs.get(doc)
            if not isinstance(v, list):
                v = docs[doc] = [0] * last + [v or 0]
            v[i] = c
    return lengths
