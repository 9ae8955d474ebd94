"""The viewer's safety: untrusted text stays text, GET only, loopback by default, the token."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from urllib.parse import quote

import httpx
import pytest

from store.format import js_stringify
from tests.web import sessions
from tests.web.conftest import Served, free_port, start_server, stop

SCRIPT = re.compile(r"<script", re.IGNORECASE)


def test_hostile_content_is_escaped(served: Served) -> None:
    for path in (f"/sessions/{sessions.HOSTILE_ID}", f"/sessions/{sessions.HOSTILE_ID}?leaf=h3",
                 f"/sessions/{sessions.HOSTILE_ID}?leaf=h9", "/usage", f"/usage?session={sessions.HOSTILE_ID}",
                 "/?q=pwned", "/?q=click", "/"):
        page = served.get(path)
        assert page.status_code == 200, path
        html = page.text
        assert not SCRIPT.search(html), f"{path}: a <script> tag made it into the page"
        images = re.findall(r"<img[^>]*>", html)
        assert all(re.fullmatch(r'<img class="image" alt="image from the session" src="data:image/png;base64,'
                                r'[A-Za-z0-9+/=]+">', tag) for tag in images), images
        assert 'href="javascript:' not in html.lower() and "\x1b" not in html, path
        assert "\u202e" not in html, f"{path}: a bidi override reached the page"
    page = served.get(f"/sessions/{sessions.HOSTILE_ID}").text
    assert "&lt;script&gt;document.title=" in page
    assert "[click](javascript:alert(1))" in page  # a markdown link stays its text
    assert "RED ⟨U+202E⟩evil⟨U+202C⟩" in page  # ANSI colour codes gone, the bidi override shown
    assert 'src="data:image/png;base64,' in page  # the raster image is shown
    assert "[image: image/svg+xml&#34;&gt;&lt;script&gt;x&lt;/script&gt;]" in page  # the other is named only


def test_pages_forbid_scripts_and_other_origins(served: Served) -> None:
    headers = served.get("/").headers
    assert "script-src" not in headers["content-security-policy"]  # default-src 'none' covers scripts
    assert headers["content-security-policy"].startswith("default-src 'none'")
    assert headers["x-content-type-options"] == "nosniff"
    html = served.get(f"/sessions/{sessions.LONG_ID}").text
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html), "the page must not load anything from elsewhere"


def test_get_only(served: Served) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        response = httpx.request(method, served.base + "/api/sessions", timeout=30)
        assert response.status_code == 405, method


def test_foreign_host_names_are_refused_without_token(served: Served) -> None:
    """A page elsewhere cannot read the viewer by DNS rebinding: only loopback Host names."""
    assert served.get("/", headers={"Host": "attacker.example"}).status_code == 421
    assert served.get("/", headers={"Host": "localhost"}).status_code == 200


def test_non_loopback_bind_needs_a_token(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PI_STORE_SERVE_TOKEN"}
    result = subprocess.run([sys.executable, "-m", "store.cli", "--db", f"sqlite:///{tmp_path / 's.db'}", "serve",
                             "--host", "0.0.0.0", "--port", str(free_port())],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode != 0
    assert "without --token" in result.stderr


@pytest.mark.parametrize("token", ['"abcdefgh"', " abcdefgh", "abcd,efgh", "abcd\\efgh", "short"])
def test_a_token_a_cookie_cannot_carry_is_refused(tmp_path, token: str) -> None:
    """A token with quotes or a leading space was accepted, and the cookie ``?token=`` set came back
    changed (the parser strips them): every following link and the stylesheet were 401."""
    result = subprocess.run([sys.executable, "-m", "store.cli", "--db", f"sqlite:///{tmp_path / 's.db'}", "serve",
                             "--port", str(free_port()), "--token", token],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "the token must be at least 8" in result.stderr, result.stderr


def test_token_is_required_on_every_request(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "import",
                    str(sessions.hostile(tmp_path / "h.jsonl"))], check=True, capture_output=True, timeout=300)
    token = "s3cret-token-for-tests"
    process, base = start_server(url, env={**os.environ, "PI_STORE_SERVE_TOKEN": token})
    try:
        for path in ("/", "/api/sessions", f"/sessions/{sessions.HOSTILE_ID}", "/static/style.css", "/usage"):
            assert httpx.get(base + path, timeout=60).status_code == 401, path
            assert httpx.get(base + path, params={"token": "wrong-token-xx"}, timeout=60).status_code == 401
            assert httpx.get(base + path, headers={"X-Pi-Store-Token": token}, timeout=60).status_code == 200
            assert httpx.get(base + path, headers={"Authorization": f"Bearer {token}"}, timeout=60).status_code == 200
        first = httpx.get(base + "/", params={"token": token}, timeout=60)
        assert first.status_code == 200
        # the page's own links carry the token by the cookie that ?token= set
        assert httpx.get(base + "/api/sessions", cookies=first.cookies, timeout=60).status_code == 200
        # a request let in by its header remembers no other ?token= (it once set that as the cookie,
        # and one holding CR LF or NUL broke the response: an empty reply, a traceback on the terminal)
        for other in ("wrong-token-xx", "a\x00b", "a\r\nSet-Cookie: x=y"):
            answer = httpx.get(base + "/", params={"token": other}, headers={"X-Pi-Store-Token": token}, timeout=60)
            assert answer.status_code == 200 and "set-cookie" not in answer.headers, other
    finally:
        stop(process)
    assert "Traceback" not in process.stderr.read()


def test_session_ids_with_a_slash_or_none_open(tmp_path) -> None:
    """Listed, linked, and once a 404: the routes' ids stopped at the first "/" (which arrives
    decoded from %2F). An id ending in "/context" was read as the context route of the id before it."""
    ids = ["a/b", "", "ü/ß😀", "a", "a/context", "a/usage", "nl\nid"]  # a/context, a/usage: told by %2F
    files = [sessions.write(tmp_path / f"{n}.jsonl", session_id, [sessions._user("u1", None, 1, "hello")])
             for n, session_id in enumerate(ids)]
    url = f"sqlite:///{tmp_path / 's.db'}"
    subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "import", *map(str, files)], check=True,
                   capture_output=True, timeout=300)
    process, base = start_server(url)
    try:
        listing = httpx.get(base + "/", timeout=60).text
        for session_id in ids:
            link = "/sessions/" + quote(session_id, safe="")
            assert f'href="{link}"' in listing, session_id
            assert httpx.get(base + link, timeout=60).status_code == 200, session_id
            api = httpx.get(base + "/api/sessions/" + quote(session_id, safe=""), timeout=60)
            assert api.status_code == 200 and api.json()["session"]["id"] == session_id
            for tail in ("/context", "/usage"):
                answer = httpx.get(base + "/api/sessions/" + quote(session_id, safe="") + tail, timeout=60)
                assert answer.status_code == 200 and "session" not in answer.json(), (session_id, tail)
            context = httpx.get(base + "/api/sessions/" + quote(session_id, safe="") + "/context", timeout=60)
            assert context.json()["sessionId"] == session_id
        spelled = httpx.get(base + "/api/sessions/a/cont%65xt", timeout=60)  # %65 is "e": the route all the same
        assert spelled.json()["sessionId"] == "a"
        usage = httpx.get(base + "/usage?session=", timeout=60).text  # the usage of the session whose id is ""
        assert "Usage of " in usage and "Usage, all sessions" not in usage
        assert "Usage, all sessions" in httpx.get(base + "/usage", timeout=60).text
    finally:
        stop(process)


def test_lone_surrogates_in_ids_and_text(tmp_path) -> None:
    """JSON allows lone surrogates (``\\ud800``) in ids and text; the pages still render (they
    were a 500 when a link to such an id was built) and the links lead to them (the server's
    decoding turned the escapes into U+FFFD: a 404)."""
    session_id = "0190c0de-0000-7000-8000-00000000d800\udc00"
    lines = [{"type": "session", "version": 3, "id": session_id, "timestamp": "2026-03-01T00:00:00.000Z", "cwd": "/w"},
             {"type": "message", "id": "a\ud800", "parentId": None, "timestamp": "2026-03-01T00:00:01.000Z",
              "message": {"role": "user", "content": "hi \udfff", "timestamp": 1}},
             {"type": "message", "id": "b", "parentId": "a\ud800", "timestamp": "2026-03-01T00:00:02.000Z",
              "message": {"role": "user", "content": "yo", "timestamp": 2}}]
    path = tmp_path / "surrogate.jsonl"
    path.write_text("".join(js_stringify(line) + "\n" for line in lines), "ascii")  # written as \ud800 escapes
    url = f"sqlite:///{tmp_path / 's.db'}"
    subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "import", str(path)], check=True,
                   capture_output=True, timeout=300)
    process, base = start_server(url)
    quoted = quote(session_id, safe="", errors="surrogatepass")
    try:
        for page in (f"/sessions/{quoted}", f"/sessions/{quoted}?leaf=b", f"/api/sessions/{quoted}",
                     f"/api/sessions/{quoted}/context"):
            assert httpx.get(base + page, timeout=60).status_code == 200, page
        listing = httpx.get(base + "/", timeout=60).text
        assert f'href="/sessions/{quoted}"' in listing
        html = httpx.get(base + f"/sessions/{quoted}", timeout=60).text
        assert "⟨U+D800⟩" in html and "⟨U+DFFF⟩" in html  # shown, not dropped
        link = re.search(r'href="(/sessions/[^"]*leaf=a[^"]*)"', html).group(1).replace("&amp;", "&")
        assert httpx.get(base + link, timeout=60).status_code == 200
        leaf = quote("a\ud800", safe="", errors="surrogatepass")
        context = httpx.get(base + f"/api/sessions/{quoted}/context?leaf={leaf}", timeout=60)
        assert context.status_code == 200
        assert [m["message"]["content"] for m in context.json()["messages"]] == ["hi \udfff"]
        assert httpx.get(base + f"/sessions/{quoted}?leaf=a%FF", timeout=60).status_code == 404  # bad bytes: no such id
    finally:
        stop(process)


def test_values_of_other_types_than_pis_render(tmp_path) -> None:
    """Ids, edit targets, image types, commands and tool names that are arrays, objects or
    numbers (a damaged or hand-made file): every page and API answer renders (each was a 500),
    the conversation and context of a leaf whose id is not a string are shown (the page said it
    had no entry), and that entry gets no link (it cannot be selected)."""
    def user(entry_id: object, parent: object, text: str) -> dict:
        return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "2026-03-01T00:00:01.000Z",
                "message": {"role": "user", "content": text, "timestamp": 1}}

    def edit(target: object) -> dict:
        return {"type": "context_edit", "id": "e1", "parentId": "u1", "timestamp": "2026-03-01T00:00:02.000Z",
                "targetId": target, "replacement": None}

    odd = {
        "edit-target": [user("u1", None, "hi"), edit(["u1"])],
        "list-id-leaf": [user("u1", None, "hi"), edit("u1"), user(["x"], "e1", "the leaf")],
        "object-id-kept": [user("u1", None, "hi"), {"type": "compaction", "id": "c1", "parentId": "u1",
                           "timestamp": "2026-03-01T00:00:02.000Z", "summary": "s", "firstKeptEntryId": "u1",
                           "tokensBefore": 5}, user({"a": 1}, "c1", "the leaf")],
        "image-type": [{**user("u1", None, ""), "message": {"role": "user", "timestamp": 1, "content": [
            {"type": "image", "mimeType": ["image/png"], "data": "AAAA"}]}}],
        "command-number": [user("u1", None, "hi"), {**user("b1", "u1", ""), "message": {
            "role": "bashExecution", "command": 42, "output": "ok", "exitCode": 0, "timestamp": 2}}],
        "tool-name-object": [user("u1", None, "hi"), {**user("t1", "u1", ""), "message": {
            "role": "toolResult", "toolCallId": "c1", "toolName": {"n": 1}, "content": [], "isError": False,
            "timestamp": 2}}],
    }
    files = [sessions.write(tmp_path / f"{name}.jsonl", name, entries) for name, entries in odd.items()]
    url = f"sqlite:///{tmp_path / 's.db'}"
    subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "import", *map(str, files)], check=True,
                   capture_output=True, timeout=300)
    process, base = start_server(url)
    try:
        for name in odd:
            for path in (f"/sessions/{name}", f"/api/sessions/{name}", f"/api/sessions/{name}/context"):
                assert httpx.get(base + path, timeout=60).status_code == 200, path
        page = httpx.get(base + "/sessions/list-id-leaf", timeout=60).text
        assert 'id="ctx-count">1 from 3 context entries' in page and "the leaf" in page
        assert '<span class="meta id">[&#34;x&#34;]</span>' in page
        context = httpx.get(base + "/api/sessions/edit-target/context", timeout=60).json()
        assert context["hidden"] == [] and context["messageCount"] == 1  # an array target hides nothing
        assert "[image: [&#34;image/png&#34;]]" in httpx.get(base + "/sessions/image-type", timeout=60).text
        assert '<span class="text">$ 42</span>' in httpx.get(base + "/sessions/command-number", timeout=60).text
    finally:
        stop(process)


def test_open_folds_that_open_nothing_are_not_carried_into_links(served: Served) -> None:
    """Each ``open`` key is copied into every link of the page: unknown and repeated keys made a
    page of tree rows × query length (a 21 KB query gave a 416 MB page)."""
    plain = served.get(f"/sessions/{sessions.LONG_ID}")
    flooded = served.get(f"/sessions/{sessions.LONG_ID}?" + "&".join(["open=nothing"] * 500))
    assert plain.status_code == flooded.status_code == 200
    assert len(flooded.text) == len(plain.text)
    fold = re.search(r'href="[^"]*open=([^"&#]+)', plain.text).group(1)
    opened = served.get(f"/sessions/{sessions.LONG_ID}?open={fold}&open={fold}&open=nothing").text
    assert f"open={fold}" in opened and "open=nothing" not in opened
    assert max(link.count("open=") for link in re.findall(r'href="([^"]*)"', opened)) <= 2  # its own, and one more


def test_port_0_is_announced_as_bound_and_a_port_in_use_is_one_error_line(tmp_path) -> None:
    """``--port 0`` printed ``http://127.0.0.1:0/``; a port in use printed the banner, then
    uvicorn's own error, and exited 3. The command binds first: the banner names the port it
    got, and a busy port is the command's one-line error."""
    import socket
    import time

    db = str(tmp_path / "s.db")
    branchy = str(sessions.branchy(tmp_path / "b.jsonl"))
    subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "import", branchy], check=True, capture_output=True,
                   timeout=120)
    process = subprocess.Popen([sys.executable, "-m", "store.cli", "--db", db, "serve", "--port", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()
        port = int(re.fullmatch(r"pi-store serve: http://127\.0\.0\.1:(\d+)/ \(read-only; Ctrl-C stops\)\n",
                                banner).group(1))
        assert port != 0
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/static/style.css", timeout=5).status_code == 200
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the announced port never answered"
                time.sleep(0.2)
    finally:
        stop(process)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "serve", "--port", str(taken)],
                              capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (1, f"Error: cannot listen on 127.0.0.1:{taken}: Address already in use\n")
