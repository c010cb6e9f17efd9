"""app/api/guard.py and app/api/listen.py against a live server: what a web page in the
user's browser could do to a keyless loopback server (issue 10, item 3), and connections
that never finish their request head (item 7).

Browsers are simulated with the headers they send: a "simple" cross-origin POST (text/plain,
a form, multipart) goes out without a preflight; DNS rebinding shows up as a foreign `Host:`.
"""

from __future__ import annotations

import socket
import time

import openai
import pytest

from app.api import listen
from app.cli import main as cli_main

ASK = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": ASK}
REPLY = "Ok.\n</think>\n\nfine"


# --- 415: only JSON bodies run ----------------------------------------------------------------


JSON_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.mark.parametrize(("ctype", "body"), [
    ("text/plain;charset=UTF-8", JSON_BODY),
    ("application/x-www-form-urlencoded", b"model=m&messages=hi"),
    ("multipart/form-data; boundary=xx", b"--xx\r\nContent-Disposition: form-data; name=a\r\n\r\n"
                                         b"1\r\n--xx--\r\n"),
    (None, JSON_BODY),
])
def test_a_body_that_is_not_json_is_415_and_runs_nothing(serve, ctype, body):
    live = serve(REPLY)
    headers = {} if ctype is None else {"content-type": ctype}
    http = live.http()
    r = http.post("/v1/chat/completions", content=body, headers=headers)
    assert r.status_code == 415
    err = r.json()["error"]
    assert err["code"] == "unsupported_media_type" and "application/json" in err["message"]
    r = http.post("/v1/messages", content=body, headers=headers)
    assert r.status_code == 415
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert live.runs == []


def test_json_with_a_charset_is_served(serve):
    live = serve(REPLY)
    r = live.http().post("/v1/chat/completions", content=b'{"messages": [{"role": "user", '
                         b'"content": "hi"}]}',
                         headers={"content-type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"


# --- 403: Host must name the bound address -------------------------------------------------


def test_a_foreign_host_header_is_refused_everywhere(serve):
    live = serve(REPLY)
    http = live.http()
    port = live.thread.port
    for path in ("/health", "/props", "/metrics", "/v1/models"):
        r = http.get(path, headers={"host": f"rebind.evil.example:{port}"})
        assert r.status_code == 403, path
        assert r.json()["error"]["code"] == "host_not_allowed"
    r = http.post("/v1/messages", json={**CHAT, "max_tokens": 5},
                  headers={"host": "rebind.evil.example"})
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    assert live.runs == []
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert http.get("/v1/models", headers={"host": host}).status_code == 200, host


def test_allow_host_and_wildcard_binds(serve):
    live = serve(REPLY, allowed_hosts=("prism.lan",))
    http = live.http()
    assert http.get("/v1/models", headers={"host": "prism.lan:8421"}).status_code == 200
    assert http.get("/v1/models", headers={"host": "other.lan"}).status_code == 403
    # Bound to every interface: IP literals (a LAN address) are fine, DNS names still not.
    live = serve(REPLY, host="0.0.0.0", api_key="k")
    http = live.http(headers={"authorization": "Bearer k"})
    assert http.get("/v1/models", headers={"host": "192.168.1.20:8421"}).status_code == 200
    assert http.get("/v1/models", headers={"host": "rebind.evil.example"}).status_code == 403


def test_the_sdks_pass_the_host_check(serve):
    live = serve(REPLY)
    assert live.openai().chat.completions.create(
        model="m", messages=ASK).choices[0].message.content == "fine"


# --- CORS ------------------------------------------------------------------------------------


def test_no_cors_by_default(serve):
    live = serve(REPLY)
    http = live.http()
    pre = http.options("/v1/chat/completions", headers={
        "origin": "https://evil.example", "access-control-request-method": "POST",
        "access-control-request-headers": "content-type"})
    assert pre.status_code == 403
    assert not any(k.lower().startswith("access-control-") for k in pre.headers)
    r = http.post("/v1/chat/completions", json=CHAT, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in r.headers
    assert live.runs == []


def test_cors_origin_allows_one_browser_client(serve):
    webui = "http://localhost:3000"
    live = serve(REPLY, REPLY, cors_origins=(webui,))
    http = live.http()
    pre = http.options("/v1/chat/completions", headers={
        "origin": webui, "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type, x-stainless-os"})
    assert pre.status_code == 204
    assert pre.headers["access-control-allow-origin"] == webui
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "x-stainless-os" in pre.headers["access-control-allow-headers"]
    r = http.post("/v1/chat/completions", json=CHAT, headers={"origin": webui})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == webui
    assert "Origin" in r.headers["vary"]
    with http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True},
                     headers={"origin": webui}) as s:
        assert s.status_code == 200 and s.headers["access-control-allow-origin"] == webui
        assert "[DONE]" in s.read().decode()
    # an error is readable by the allowed page too; another origin is still refused
    r = http.post("/v1/chat/completions", json={"messages": []}, headers={"origin": webui})
    assert r.status_code == 400 and r.headers["access-control-allow-origin"] == webui
    r = http.get("/v1/models", headers={"origin": "http://localhost:3001"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


def test_preflight_needs_no_key_but_the_request_does(serve):
    webui = "https://chat.example"
    live = serve(REPLY, api_key="k", cors_origins=(webui,))
    http = live.http()
    pre = http.options("/v1/models", headers={"origin": webui,
                                               "access-control-request-method": "GET"})
    assert pre.status_code == 204
    r = http.get("/v1/models", headers={"origin": webui})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == webui
    r = http.get("/v1/models", headers={"origin": webui, "authorization": "Bearer k"})
    assert r.status_code == 200


# --- start-up refusals and /props ------------------------------------------------------------


@pytest.mark.parametrize("key", [" ", "", "\t"])
def test_a_blank_api_key_is_refused_at_start(key, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--replay", "none.txt", "--api-key", key])
    assert e.value.code == 2
    assert "blank" in capsys.readouterr().err


def test_a_blank_api_key_from_the_environment_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("PRISM_API_KEY", "  ")
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--replay", "none.txt"])
    assert e.value.code == 2 and "blank" in capsys.readouterr().err


def test_props_shows_the_file_name_not_the_path(serve):
    live = serve("x", pack="smollm2")
    gguf = live.service.pack.gguf
    assert gguf is not None and "/" in str(gguf)
    props = live.http().get("/props").json()
    assert props["model_path"] == gguf.name
    assert str(gguf.parent) not in live.http().get("/props").text


# --- half-open connections -------------------------------------------------------------------


def test_a_connection_that_never_finishes_its_head_is_closed(serve, monkeypatch):
    monkeypatch.setattr(listen.HeaderTimeoutH11, "header_timeout_s", 0.5)
    live = serve(REPLY)
    silent = socket.create_connection((live.thread.host, live.thread.port))
    half = socket.create_connection((live.thread.host, live.thread.port))
    try:
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for conn in (silent, half):
            conn.settimeout(5)
            t0 = time.monotonic()
            assert conn.recv(1024) == b""  # closed by the server, not by our timeout
            assert time.monotonic() - t0 < 4
    finally:
        silent.close()
        half.close()
    # a client that takes its time with a whole request is still served
    assert live.openai().chat.completions.create(
        model="m", messages=ASK).choices[0].message.content == "fine"


def test_a_kept_alive_connection_is_served_again(serve, monkeypatch):
    monkeypatch.setattr(listen.HeaderTimeoutH11, "header_timeout_s", 0.5)
    live = serve(REPLY, REPLY)
    client = live.openai()
    for _ in range(2):
        assert client.chat.completions.create(
            model="m", messages=ASK).choices[0].message.content == "fine"
        time.sleep(0.7)  # past the head deadline, within uvicorn's 5 s keep-alive


def test_openai_sdk_error_type_for_403(serve):
    live = serve(REPLY)
    client = openai.OpenAI(base_url=live.url + "/v1", api_key="x", max_retries=0,
                           default_headers={"host": "evil.example"})
    live.clients.append(client)
    with pytest.raises(openai.PermissionDeniedError):
        client.models.list()
