"""Reading the upstream commit out of a hand-made snapshot message (zmr.importing.upstream_words)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from zmr.importing.upstream_words import named_commits, named_urls

FULL = "0123456789abcdef0123456789abcdef01234567"

shas = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40).filter(lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s))
abbrev_lengths = st.integers(min_value=7, max_value=16)
names = st.from_regex(r"[a-z][a-z0-9-]{1,12}", fullmatch=True)
repos = st.builds(lambda o, r: f"https://github.com/{o}/{r}", names, names)
# Prose: words with no digit next to a hex letter run long enough to be an id.
prose = st.lists(
    st.sampled_from(
        ["snapshot", "of", "the", "release", "zero-mismatch", "changes", "vLLM", "Megatron-LM", "pinned", "to", "-", "(see notes)", "2024", "v0.11.0"]
    ),
    max_size=12,
).map(" ".join)

WORDINGS = [
    ("{sha}", "bare", False),
    ("snapshot at commit {sha}", "commit-word", False),
    ("{repo}/commit/{sha}", "commit-url", True),
    ("Snapshot of {repo}/commit/{sha}.", "commit-url", True),
    ("{name} @ {sha}", "at", False),
    ("{name}@{sha}", "at", False),
    ("Upstream: {repo} {sha}", "upstream-line", True),
    ("Upstream: {repo}@{sha}", "upstream-line", True),
    ("upstream commit: {sha}", "upstream-line", False),
    ("Zmr-Upstream: {repo}\nZmr-Upstream-Commit: {sha}", "trailer", True),
]


@settings(max_examples=60, deadline=None)
@given(sha=shas, cut=abbrev_lengths, full=st.booleans(), repo=repos, name=names, before=prose, after=prose, wording=st.sampled_from(WORDINGS))
def test_every_wording_names_the_commit_and_its_repository(sha, cut, full, repo, name, before, after, wording):
    template, how, has_url = wording
    commit = sha if full or how == "trailer" else sha[:cut]
    if not full and how != "trailer" and not (any(c.isdigit() for c in commit) and any(c.isalpha() for c in commit)) and how == "bare":
        commit = sha  # a bare abbreviation of only digits or only letters is not taken for an id (dates, words)
    message = f"{before}\n\n{template.format(sha=commit, repo=repo, name=name)}\n\n{after}\n"
    found = named_commits(message)
    assert found, message
    assert found[0].commit == commit and found[0].how == how, (message, found)
    if has_url:
        assert found[0].url == repo
        assert named_urls(message)[0] == repo


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=string.printable + "äöü名前", max_size=400))
def test_any_text_parses_and_every_id_is_hex_of_an_id_length(text):
    for named in named_commits(text):
        assert all(c in "0123456789abcdef" for c in named.commit)
        assert 7 <= len(named.commit) <= 40 or len(named.commit) == 64
        assert named.commit in text.lower()
    named_urls(text)


@settings(max_examples=60, deadline=None)
@given(prose)
def test_prose_without_ids_names_nothing(text):
    assert named_commits(text) == []


def test_not_ids():
    assert named_commits("mail dev@abc1234.example.com on 20240101; a decade of added facade") == []
    assert named_commits("see abc1234-patched and 1234567") == []


def test_strongest_wording_first_and_each_id_once():
    other = "fedcba9876543210fedcba9876543210fedcba98"
    message = f"vLLM snapshot {FULL[:12]}, then {other[:9]}\n\nUpstream: https://github.com/vllm-project/vllm {FULL}\nalso {FULL}\n"
    found = named_commits(message)
    assert [(n.commit, n.how, n.url) for n in found] == [(FULL, "upstream-line", "https://github.com/vllm-project/vllm"), (other[:9], "bare", None)]
    assert named_urls("see https://github.com/NVIDIA/Megatron-LM/tree/" + FULL) == ["https://github.com/NVIDIA/Megatron-LM"]
