"""The history index on real SQLite files: building, incremental updates, bad and vanished transcripts."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectcore.history import (
    Entrypoint,
    Field,
    Harness,
    SearchScope,
    analyze,
    corpus_stats,
    query_terms,
    tokens,
)
from connectd.history.index import DB_NAME, SCHEMA_VERSION, HistoryIndex
from connectd.history.parsers import SkipReason
from connectd.history.repos import repo_of
from tests.fixtures.history.transcripts import (
    Claude,
    Codex,
    append_jsonl,
    codex_titles,
    make_repo,
    make_worktree,
    write_jsonl,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"
MAIN = "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b"
CODEX_MAIN = "019bce9f-0a40-79e2-8351-8818e8487fb6"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path, Path]:
    claude = tmp_path / "claude"
    codex = tmp_path / "codex"
    shutil.copytree(FIXTURES / "claude", claude)
    shutil.copytree(FIXTURES / "codex", codex)
    return tmp_path / "data", claude, codex


@pytest.fixture
def index(tmp_path: Path):
    ix = HistoryIndex(tmp_path / "data")
    yield ix
    ix.close()


def test_fixture_corpus_is_indexed(roots, index):
    _, claude, codex = roots
    report = index.update(claude, codex)
    assert report.files_seen == 6 and report.files_read == 6
    assert report.skips == []
    got = {(e.harness, e.session_id): e for e in index.entries()}
    assert set(got) == {
        (Harness.CLAUDE, MAIN),
        (Harness.CLAUDE, "a4c2e9f1b3d5e7a9b"),
        (Harness.CLAUDE, "5d3c1b2a-9e8f-4a7b-8c6d-1e2f3a4b5c6d"),
        (Harness.CODEX, CODEX_MAIN),
        (Harness.CODEX, "019bcea0-1b51-7af3-9462-9929f9598a07"),
        (Harness.CODEX, "019bcea1-2c62-7b04-a573-aa3a0a6a9b18"),
    }
    main = got[(Harness.CLAUDE, MAIN)]
    assert main.title == "ws reconnect fix"
    assert main.resume_argv == ("claude", "--resume", MAIN)
    assert got[(Harness.CLAUDE, "a4c2e9f1b3d5e7a9b")].entrypoint is Entrypoint.SUBAGENT
    assert got[(Harness.CLAUDE, "a4c2e9f1b3d5e7a9b")].resume_argv is None
    # Codex's session index names the thread (newest row wins).
    assert got[(Harness.CODEX, CODEX_MAIN)].title == "Dark mode settings toggle"
    full = index.get(Harness.CLAUDE, MAIN, with_prompts=True)
    assert full.prompts[0].startswith("The websocket reconnect test is flaky")


def test_tool_output_never_reaches_the_index_file(roots, index):
    data, claude, codex = roots
    index.update(claude, codex)
    index.close()
    for name in os.listdir(data):
        assert b"TOOLSECRET" not in (data / name).read_bytes()
        assert b"TOOLSECRET".lower() not in (data / name).read_bytes()


def test_index_file_is_private_and_in_wal_mode(roots, index):
    data, claude, codex = roots
    index.update(claude, codex)
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    for name in os.listdir(data):
        assert stat.S_IMODE(os.stat(data / name).st_mode) == 0o600, name
    with sqlite3.connect(data / DB_NAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_existing_world_readable_data_dir_is_tightened(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    HistoryIndex(data).close()
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700


def test_sql_statistics_match_the_reference(roots, index):
    """The SQL candidates and statistics equal what the pure reference computes from the entries."""
    _, claude, codex = roots
    Claude("3e0c2b7a-0000-4000-8000-0000000000aa", "/home/dev/café").prompt(
        "Überprüfe die Straße naïve_case x2y"
    ).write(claude)
    index.update(claude, codex)
    entries = [index.get(e.harness, e.session_id, with_prompts=True) for e in index.entries()]
    terms = query_terms("websocket dark mode fix toggle straße naïve x2y 4955 café ws")
    ref = corpus_stats(entries)
    sql = index.stats(terms)
    assert sql.documents == ref.documents
    for f in Field:
        assert sql.average_length[f] == pytest.approx(ref.average_length[f])
    assert sql.document_frequency == {
        t: ref.document_frequency[t] for t in terms if t in ref.document_frequency
    }
    everything = SearchScope(include_headless=True, include_subagents=True)
    got = {c.entry.key: c for c in index.candidates(terms, everything)}
    want = {e.key: analyze(e, terms) for e in entries}
    want = {k: c for k, c in want.items() if c.term_frequency}
    assert set(got) == set(want)
    for key, cand in got.items():
        assert dict(cand.term_frequency) == dict(want[key].term_frequency), key
        assert dict(cand.field_length) == dict(want[key].field_length), key


def test_unchanged_transcripts_are_not_reopened(roots, index):
    _, claude, codex = roots
    index.update(claude, codex)
    again = index.update(claude, codex)
    assert (again.files_read, again.bytes_read, again.entries_written) == (0, 0, 0)


def test_appended_transcript_is_read_from_its_offset(roots, index):
    _, claude, codex = roots
    index.update(claude, codex)
    path = next((claude / "projects").rglob(f"{MAIN}.jsonl"))
    before = path.stat().st_size
    s = Claude(MAIN, "/home/dev/widget", branch="fix/ws-final")
    s.minute = 100
    s.prompt("Now squash the commits before merging")
    append_jsonl(path, s.records)
    added = path.stat().st_size - before
    report = index.update(claude, codex)
    assert (report.files_read, report.files_resumed) == (1, 1)
    assert report.bytes_read == added  # only the new part was read
    e = index.get(Harness.CLAUDE, MAIN, with_prompts=True)
    assert e.prompts[-1] == "Now squash the commits before merging"
    assert e.branches[-1] == "fix/ws-final"
    assert e.title == "ws reconnect fix"  # state carried over from the first read
    hits = index.candidates(["squash"], SearchScope())
    assert [c.entry.session_id for c in hits] == [MAIN]


def test_a_sessions_version_moves_when_its_entry_is_rewritten_and_only_then(roots, index):
    """What the directory's routing facts follow: an entry read at one version is current until the
    version moves (a PR named later in the session reaches the pane's facts)."""
    _, claude, codex = roots
    assert index.version(Harness.CLAUDE, MAIN) == 0
    index.update(claude, codex)
    first = index.version(Harness.CLAUDE, MAIN)
    other = index.version(Harness.CODEX, CODEX_MAIN)
    assert first > 0 and other > 0
    index.update(claude, codex)  # nothing changed: no version moves
    assert (index.version(Harness.CLAUDE, MAIN), index.version(Harness.CODEX, CODEX_MAIN)) == (first, other)
    path = next((claude / "projects").rglob(f"{MAIN}.jsonl"))
    s = Claude(MAIN, "/home/dev/widget", branch="fix/ws-final")
    s.minute = 100
    s.prompt("Please take over https://github.com/acme/widget/pull/12")
    append_jsonl(path, s.records)
    index.update(claude, codex, paths=[(Harness.CLAUDE, str(path))])
    assert index.version(Harness.CLAUDE, MAIN) > first
    assert index.version(Harness.CODEX, CODEX_MAIN) == other
    assert "https://github.com/acme/widget/pull/12" in index.get(Harness.CLAUDE, MAIN).prs
    moved = index.version(Harness.CLAUDE, MAIN)
    index.remove(Harness.CLAUDE, [MAIN], [str(path)])
    assert index.version(Harness.CLAUDE, MAIN) > moved  # removed: whoever read it reads again


def test_rewritten_transcript_is_reparsed_whole(roots, index):
    _, claude, codex = roots
    index.update(claude, codex)
    path = next((claude / "projects").rglob(f"{MAIN}.jsonl"))
    Claude(MAIN, "/home/dev/widget").prompt("a completely different first prompt").write(claude)
    assert path.exists()
    report = index.update(claude, codex)
    assert (report.files_read, report.files_resumed) == (1, 0)
    assert index.get(Harness.CLAUDE, MAIN, with_prompts=True).prompts == (
        "a completely different first prompt",
    )


def test_vanished_transcript_marks_its_entry_source_missing(roots, index):
    _, claude, codex = roots
    index.update(claude, codex)
    rollout = next((codex / "sessions").rglob(f"*{CODEX_MAIN}.jsonl"))
    saved = rollout.read_bytes()
    rollout.unlink()
    report = index.update(claude, codex)
    assert report.files_missing == 1
    assert [s.reason for s in report.skips] == [SkipReason.VANISHED]
    e = index.get(Harness.CODEX, CODEX_MAIN)
    assert e.source_missing and e.resume_argv is None
    assert [c.entry.session_id for c in index.candidates(["localstorage"], SearchScope())] == [CODEX_MAIN]
    # It comes back: the mark goes away.
    rollout.write_bytes(saved)
    index.update(claude, codex)
    e = index.get(Harness.CODEX, CODEX_MAIN)
    assert not e.source_missing and e.resume_argv == ("codex", "resume", CODEX_MAIN)


def test_full_rebuild_drops_sessions_whose_transcript_is_gone(roots, index):
    _, claude, codex = roots
    index.update(claude, codex)
    next((codex / "sessions").rglob(f"*{CODEX_MAIN}.jsonl")).unlink()
    index.update(claude, codex)
    assert index.get(Harness.CODEX, CODEX_MAIN) is not None
    report = index.update(claude, codex, full=True)
    assert report.files_read == 5
    assert index.get(Harness.CODEX, CODEX_MAIN) is None
    assert index.count() == 5


def test_bad_transcripts_are_counted_never_fatal(roots, index):
    _, claude, codex = roots
    proj = claude / "projects" / "-bad"
    good = json.dumps(
        {"type": "user", "cwd": "/bad", "message": {"role": "user", "content": "still indexed"}}
    )
    (proj).mkdir(parents=True)
    (proj / "3e0c2b7a-0000-4000-8000-0000000000b1.jsonl").write_text(good + "\n" + good[:15])
    (proj / "3e0c2b7a-0000-4000-8000-0000000000b2.jsonl").write_text("{oops\n" + good + "\n")
    (proj / "3e0c2b7a-0000-4000-8000-0000000000b3.jsonl").write_bytes(b"\xff\xfe\n" + good.encode() + b"\n")
    (proj / "3e0c2b7a-0000-4000-8000-0000000000b4.jsonl").write_bytes(b"\x00\x01binary \xff garbage\n")
    small = HistoryIndex(roots[0], max_line_bytes=3000)
    (proj / "3e0c2b7a-0000-4000-8000-0000000000b5.jsonl").write_text(
        '{"x":"' + "y" * 5000 + '"}\n' + good + "\n"
    )
    (proj / "3e0c2b7a-0000-4000-8000-0000000000b6.jsonl").write_text(good + "\n")
    report = small.update(claude, codex)
    small.close()
    counts = report.skip_counts()
    assert counts[SkipReason.TRUNCATED] == 1
    assert counts[SkipReason.INVALID_JSON] == 1
    assert counts[SkipReason.NOT_UTF8] == 2
    assert counts[SkipReason.TOO_LONG] == 1
    ix = HistoryIndex(roots[0])
    stored = {e.session_id: e for e in ix.entries()}
    for n in (1, 2, 3, 5, 6):
        assert f"3e0c2b7a-0000-4000-8000-0000000000b{n}" in stored
    assert "3e0c2b7a-0000-4000-8000-0000000000b4" not in stored  # nothing usable in it
    assert any(path.endswith("b4.jsonl") for path, _, _ in ix.skipped_files())
    ix.close()


def test_worktrees_fold_into_their_main_repository(tmp_path, index):
    main = make_repo(tmp_path / "src" / "widget")
    wt = make_worktree(main, tmp_path / "wt" / "widget-feature", "widget-feature")
    (main / "pkg").mkdir()
    assert repo_of(str(wt)) == str(main)
    assert repo_of(str(main / "pkg")) == str(main)
    sub = tmp_path / "src" / "widget" / "vendor" / "lib"
    sub.mkdir(parents=True)
    (sub / ".git").write_text("gitdir: ../../.git/modules/lib\n")
    assert repo_of(str(sub)) == str(sub)  # a submodule is its own repository
    assert repo_of(str(tmp_path / "nowhere")) is None
    assert repo_of("relative/path") is None
    plain = tmp_path / "plain"
    plain.mkdir()
    assert repo_of(str(plain)) == str(plain)
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    Claude("3e0c2b7a-0000-4000-8000-0000000000c1", str(wt), branch="feature").prompt("feature work").write(
        claude
    )
    Codex("019bcea3-0000-7000-8000-0000000000c2", str(main / "pkg")).prompt("main work").write(codex)
    index.update(claude, codex)
    assert {e.repo for e in index.entries()} == {str(main)}
    assert [c.entry.session_id for c in index.candidates(["work"], SearchScope(repos=frozenset({str(main)})))]


def test_codex_title_rows_appended_later_update_the_entry(roots, index):
    _, claude, codex = roots
    index.update(claude, codex)
    append_jsonl(
        codex / "session_index.jsonl",
        [{"id": CODEX_MAIN, "thread_name": "Renamed thread", "updated_at": "x"}],
    )
    index.update(claude, codex)
    assert index.get(Harness.CODEX, CODEX_MAIN).title == "Renamed thread"
    codex_titles(codex, [])  # rewritten (shorter): read again from the start
    index.update(claude, codex)
    assert index.get(Harness.CODEX, CODEX_MAIN).title == ""


def test_a_growing_truncated_line_is_picked_up_when_complete(tmp_path, index):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    s = Claude("3e0c2b7a-0000-4000-8000-0000000000d1", "/w").prompt("first")
    path = s.write(claude)
    s2 = Claude("3e0c2b7a-0000-4000-8000-0000000000d1", "/w")
    s2.minute = 5
    s2.prompt("second prompt being written")
    line = json.dumps(s2.records[0])
    with open(path, "a") as f:
        f.write(line[:30])
    report = index.update(claude, codex)
    assert report.skip_counts() == {SkipReason.TRUNCATED: 1}
    with open(path, "a") as f:
        f.write(line[30:] + "\n")
    report = index.update(claude, codex)
    assert report.skips == [] and report.files_resumed == 1
    assert index.get(Harness.CLAUDE, s.session_id, with_prompts=True).prompts == (
        "first",
        "second prompt being written",
    )


def test_index_from_another_schema_version_is_rebuilt(roots):
    data, claude, codex = roots
    ix = HistoryIndex(data)
    ix.update(claude, codex)
    ix._db.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    ix.close()
    ix = HistoryIndex(data)
    assert ix.count() == 0
    assert ix._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == SCHEMA_VERSION
    ix.update(claude, codex)
    assert ix.count() == 6
    ix.close()


def test_progress_is_reported(tmp_path, index):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    for i in range(1203):
        write_jsonl(
            claude / "projects" / "-w" / f"3e0c2b7a-0000-4000-8000-{i:012d}.jsonl",
            [{"type": "user", "cwd": "/w", "message": {"role": "user", "content": f"p{i}"}}],
        )
    calls: list[tuple[int, int]] = []
    index.update(claude, codex, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (1203, 1203)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert len(calls) >= 3
    assert index.count() == 1203


def test_searches_run_while_a_long_build_is_in_progress(tmp_path, index):
    import threading

    claude, codex = tmp_path / "claude", tmp_path / "codex"
    for i in range(1500):
        write_jsonl(
            claude / "projects" / "-w" / f"3e0c2b7a-0000-4000-8000-{i:012d}.jsonl",
            [{"type": "user", "cwd": "/w", "message": {"role": "user", "content": f"concurrent build p{i}"}}],
        )
    seen: list[int] = []
    errors: list[BaseException] = []
    builder = threading.Thread(target=lambda: index.update(claude, codex))
    builder.start()
    while builder.is_alive():
        try:
            seen.append(len(index.candidates(["concurrent"], SearchScope())))
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)
            break
    builder.join()
    assert errors == []
    assert seen == sorted(seen)  # results only grow as batches commit
    assert len(index.candidates(["concurrent"], SearchScope())) == 1500


REALISTIC = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`"
    "àáâäçèéêëìíîïñòóôöùúûüÿßÀÉÖÜ¼²µ€£¥©®°±×÷ΑΒΓαβγδλμπωАБВабвгдёжзя中文字符測試日本語かなカナ한국어"
    "😀😃🎉🔥👍"
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=REALISTIC, max_size=60))
def test_core_tokens_match_the_fts5_tokenizer(text):
    """Invariant: on realistic text the core's words are exactly FTS5 unicode61's words."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 0')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    db.execute("INSERT INTO t(rowid, x) VALUES (1, ?)", (text,))
    fts = sorted(r[0] for r in db.execute("SELECT term FROM v"))
    assert sorted(tokens(text)) == fts


def test_top_candidates_rank_like_every_candidate(tmp_path, index):
    """The few candidates scored in SQL rank exactly as ranking every candidate (and as the reference)."""
    import random

    from connectcore.history import rank, scope_for, search

    claude, codex = tmp_path / "claude", tmp_path / "codex"
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "zeta"]
    for i in range(240):
        sid = f"3e0c2b7a-0000-4000-8000-{i:012d}"
        s = Claude(sid, f"/w/repo{i % 3}", branch=rng.choice(["main", "feat/alpha", "fix/omega"]))
        for _ in range(rng.randint(1, 4)):
            s.prompt(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
        if i % 7 == 0:
            s.title("ai-title", " ".join(rng.sample(words, 2)))
        s.write(claude)
    index.update(claude, codex)
    entries = [index.get(e.harness, e.session_id, with_prompts=True) for e in index.entries()]
    now = 1.77e9
    pruned = 0
    for query in ["alpha", "omega beta", "gamma delta kappa", "zeta feat", "repo1 sigma"]:
        terms = query_terms(query)
        for repo in (None, "/w/repo1"):
            scope = scope_for(repo, None, include_headless=False, include_subagents=False)
            stats = index.stats(terms)
            for limit in (1, 3, 10, 100):
                every = rank(index.candidates(terms, scope), terms, stats, scope=scope, now=now, limit=limit)
                top = index.top_candidates(terms, scope, stats, now=now, limit=limit)
                few = rank(top, terms, stats, scope=scope, now=now, limit=limit)
                pruned += len(top) < len(index.candidates(terms, scope))
                assert [(r.entry.key, r.score) for r in few] == [(r.entry.key, r.score) for r in every]
                ref = search(entries, query, scope=scope, now=now, limit=limit)
                assert [r.entry.key for r in few] == [r.entry.key for r in ref]
    assert pruned  # the SQL scoring did leave candidates out


def test_a_codex_that_received_a_message_is_not_titled_or_searched_by_connects_provenance_line(tmp_path, index):
    """Codex names its thread after its first prompt: a delivered message's provenance line is refused
    as the title (the person's first prompt names it instead) and is not indexed as the person's prompt."""
    from connectcore.delivery import provenance_line

    line = provenance_line(ref="msg-7", sender_actor="agent:3f1c9e", sender_pane="%4", sender_incarnation="tok")
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    claude.mkdir()
    got_first = "019bcea3-0000-7000-8000-0000000000d1"
    only_got = "019bcea3-0000-7000-8000-0000000000d2"
    Codex(got_first, "/w/app").prompt(f"{line}\nplease rebase onto main").prompt("Tidy the rebase notes").write(codex)
    Codex(only_got, "/w/lib").prompt(f"{line}\nrun the tests").write(codex)
    codex_titles(codex, [(got_first, line[:60]), (only_got, line)])
    index.update(claude, codex)
    got = {e.session_id: e for e in index.entries()}
    assert got[got_first].title == "Tidy the rebase notes"
    assert got[only_got].title == ""
    assert index.get(Harness.CODEX, got_first, with_prompts=True).prompts == ("Tidy the rebase notes",)
    assert not index.candidates(["msg"], SearchScope())
    assert not index.candidates(["rebase", "main"], SearchScope(repos=frozenset({"/w/app"})))[0].term_frequency.get(
        (Field.PROMPTS, "main")
    )
