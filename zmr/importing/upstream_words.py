"""The upstream commit a hand-made snapshot message names, read from its words.

Release branches made by hand name their upstream in prose, not in trailers::

    vLLM snapshot at 0123456789abcdef0123456789abcdef01234567
    Snapshot of https://github.com/vllm-project/vllm/commit/0123abc
    megatron @ 0123abc4
    Upstream: https://github.com/NVIDIA/Megatron-LM 0123abc4

``named_commits`` lists every commit id such a message may mean, strongest
wording first (zmr's own trailers, an ``Upstream:`` line, a commit URL,
``name @ id``, ``commit id``, then any bare hexadecimal word that looks like
an id), each with the repository URL written next to it, if any.
``named_urls`` lists the repository URLs the message mentions. Nothing here
is trusted: the importer accepts a candidate only when that commit's tree,
fetched from the upstream, is the snapshot's tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_ABBREV = 7

_HEX = r"[0-9a-fA-F]{7,64}"
# An id ends at a word end; "abc1234.example" (a host name) or "abc1234-x" is no id.
_END = r"(?![0-9A-Za-z_-])(?!\.[0-9A-Za-z])"
_URL = r"(?:[A-Za-z][A-Za-z0-9+.-]*://[^\s<>\"'`()\[\]]+|git@[^\s:]+:[^\s<>\"'`()\[\]]+)"

_TRAILER_COMMIT_RE = re.compile(rf"^Zmr-Upstream-Commit:\s*({_HEX}){_END}", re.M)
_TRAILER_URL_RE = re.compile(r"^Zmr-Upstream:\s*(\S+)\s*$", re.M)
# "Upstream: URL SHA", "Upstream: URL@SHA", "Upstream commit: SHA", "Source: URL at SHA".
_UPSTREAM_LINE_RE = re.compile(
    r"^[ \t>*-]*(?:upstream|source|base)(?:[ \t]+(?:commit|repo(?:sitory)?))?[ \t]*:[ \t]*"  # "Upstream commit:"
    rf"(?:(\S+?)(?:[ \t]*@[ \t]*|[ \t]+(?:at[ \t]+|commit[ \t]+)?))?({_HEX}){_END}",  # "URL@", "URL at ", then the id
    re.I | re.M,
)
# https://host/owner/repo/commit/SHA, GitLab's /-/commit/, /commits/, /tree/.
_COMMIT_URL_RE = re.compile(rf"([A-Za-z][A-Za-z0-9+.-]*://[^\s<>\"'`()\[\]]+?)/(?:-/)?(?:commit|commits|tree)/({_HEX}){_END}")
# "<name> @ <sha>", "owner/repo@sha", "URL @ sha" (not an e-mail address: a host name follows its @).
_AT_RE = re.compile(rf"(?<![\w@])({_URL}|[\w][\w.+-]*(?:/[\w.+-]+)*)[ \t]*@[ \t]*({_HEX}){_END}")
_COMMIT_WORD_RE = re.compile(rf"\b(?:commit|revision|rev|sha1?|sha-1|hash)[ \t]*[:#]?[ \t]*({_HEX}){_END}", re.I)
_BARE_RE = re.compile(rf"(?<![0-9A-Za-z_/.@#-])({_HEX}){_END}")
_URL_RE = re.compile(_URL)


@dataclass(frozen=True)
class Named:
    """One upstream commit a message names: an id (lower case; full or abbreviated) and how it was named."""

    commit: str
    url: str | None  # the repository written with it
    how: str  # trailer | upstream-line | commit-url | at | commit-word | bare

    @property
    def full(self) -> bool:
        return len(self.commit) in (40, 64)


def _id(text: str) -> str | None:
    value = text.lower()
    if len(value) in (40, 64) or MIN_ABBREV <= len(value) < 40:
        return value
    return None


def _clean_url(url: str | None) -> str | None:
    if not url:
        return None
    url = url.rstrip(".,;:!?")
    return url if _URL_RE.fullmatch(url) or url.startswith(("/", "./", "../", "file://")) else None


def _looks_like_an_id(value: str) -> bool:
    """A bare word is taken for an id when it is full length, or mixes digits and letters (not a date, not "decade")."""
    if len(value) in (40, 64):
        return True
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def named_commits(message: str) -> list[Named]:
    """Every commit id *message* may name, strongest wording first, each id once."""
    found: list[Named] = []
    seen: dict[str, int] = {}

    def add(commit_text: str, url: str | None, how: str) -> None:
        commit = _id(commit_text)
        if commit is None:
            return
        url = _clean_url(url)
        if commit in seen:
            index = seen[commit]
            if found[index].url is None and url:
                found[index] = Named(commit, url, found[index].how)
            return
        if any(other.startswith(commit) for other in seen):
            return  # an abbreviation of an id named already
        seen[commit] = len(found)
        found.append(Named(commit, url, how))

    trailer_url = None
    for match in _TRAILER_URL_RE.finditer(message):
        trailer_url = match.group(1)
    for match in _TRAILER_COMMIT_RE.finditer(message):
        add(match.group(1), trailer_url, "trailer")
    for match in _UPSTREAM_LINE_RE.finditer(message):
        add(match.group(2), match.group(1), "upstream-line")
    for match in _COMMIT_URL_RE.finditer(message):
        add(match.group(2), match.group(1), "commit-url")
    for match in _AT_RE.finditer(message):
        add(match.group(2), match.group(1), "at")
    for match in _COMMIT_WORD_RE.finditer(message):
        add(match.group(1), None, "commit-word")
    for match in _BARE_RE.finditer(message):
        if _looks_like_an_id(match.group(1)):
            add(match.group(1), None, "bare")
    return found


def named_urls(message: str) -> list[str]:
    """Repository URLs in *message*, in order, each once (commit URLs cut back to the repository)."""
    urls: list[str] = []
    for named in named_commits(message):
        if named.url and named.url not in urls:
            urls.append(named.url)
    for match in _URL_RE.finditer(message):
        url = _clean_url(re.sub(r"/(?:-/)?(?:commit|commits|tree|blob)/.*$", "", match.group(0)))
        if url and url not in urls:
            urls.append(url)
    return urls
