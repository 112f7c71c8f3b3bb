"""Fetches retry transient network errors, a bounded number of times with backoff, and say so."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import simple_model, zmr


def serve(statuses: list[int]) -> tuple[ThreadingHTTPServer, list[str]]:
    """An HTTP server that answers each request with the next status of *statuses* (the last one repeats)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(self.path)
            self.send_response(statuses[min(len(seen), len(statuses)) - 1])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_fetch_that_keeps_getting_503_is_tried_three_times_and_says_so(project, upstream):
    server, seen = serve([503])
    try:
        simple_model(project, upstream)
        manifest = project.root / "manifests/toy.yaml"
        url = f"http://127.0.0.1:{server.server_address[1]}/toy.git"
        manifest.write_text(manifest.read_text().replace(f"upstream: {upstream.path}", f"upstream: {url}"))
        project.commit_all("flaky upstream")
        result = zmr("fetch", "toy", cwd=project.root, env={"ZMR_FETCH_BACKOFF": "0.05"})
        assert result.returncode == 2
        assert "cannot fetch: The requested URL returned error: 503" in result.stderr
        assert "tried 3 times (a transient network error), waiting 0.05s, then twice as long, between tries" in result.stderr
        assert len([p for p in seen if "info/refs" in p]) == 3
        seen.clear()
        once = zmr("fetch", "toy", cwd=project.root, env={"ZMR_FETCH_ATTEMPTS": "1"})
        assert once.returncode == 2 and "tried 1 time (a transient network error)" in once.stderr and len([p for p in seen if "info/refs" in p]) == 1
    finally:
        server.shutdown()


def test_a_404_is_not_retried(project, upstream):
    server, seen = serve([404])
    try:
        simple_model(project, upstream)
        manifest = project.root / "manifests/toy.yaml"
        manifest.write_text(manifest.read_text().replace(f"upstream: {upstream.path}", f"upstream: http://127.0.0.1:{server.server_address[1]}/toy.git"))
        project.commit_all("missing upstream")
        # Processes of their own: the requests of one run are counted (in one process the run after the first asks fewer).
        zmr("fetch", "toy", cwd=project.root, process=True)  # the mirror is made: the runs below are alike
        seen.clear()
        once = zmr("fetch", "toy", cwd=project.root, env={"ZMR_FETCH_ATTEMPTS": "1"}, process=True)
        without_retries = len(seen)
        seen.clear()
        result = zmr("fetch", "toy", cwd=project.root, env={"ZMR_FETCH_BACKOFF": "0"}, process=True)
        assert once.returncode == result.returncode == 2 and "tried" not in result.stderr
        assert len(seen) == without_retries  # the same requests as with no retry at all (zmr's own fallbacks only)
    finally:
        server.shutdown()
