"""Open WebUI against Prism's model catalog, both real, on 127.0.0.1: a re-runnable check.

Not part of the test suite (Open WebUI and torch are not Prism's dependencies). It starts
`prism serve --models-dir` over the default SmolLM2 and Gemma 3 270M (symlinks in a temporary
folder, `--models-max 1`), then `open-webui serve` with its OpenAI connection set to Prism,
the connection's provider "llama.cpp" (`OPENAI_API_CONFIGS`) and Prism as its OpenAI
embedding engine, and drives Open WebUI through its own HTTP API:

  1. its model list names both models, with their load state (`loaded`, from `status.value`);
  2. its model management loads and unloads a model (`/openai/models/0/load`, `/api/models/
     unload`), Prism's `/models/sse` events reaching it through Open WebUI's proxy;
  3. a streamed chat on each model;
  4. RAG: a small document uploaded (embedded through Prism's /v1/embeddings), then a question
     with the document attached: the retrieved source must hold the made-up fact;
  5. with `--browser`, the chat page in headless Chromium (Playwright, from Open WebUI's venv):
     the model chooser, a message sent, the streamed answer; screenshots in the work folder.

It prints a table of checks and a summary line, stops both servers and exits 0 when every check
passed. Bounded: each wait has its deadline, and `--budget` seconds bound the whole run.

Setup (outside the project's venv): `python3 -m venv /tmp/owui-venv`, `/tmp/owui-venv/bin/pip
install torch==2.13.0` (the CPU wheel), then `pip install open-webui playwright`; Debian's
`chromium` for `--browser`. Run: `.venv/bin/python scripts/openwebui_check.py --browser`.

Runs on the main thread; one helper thread reads Open WebUI's model events.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FACT = "The Prism project's mascot is a heron named Ludo."
DOCUMENT = f"""Prism project notes

Prism inspects what a local language model is asked and what it answers. It serves the OpenAI,
Anthropic and Responses dialects from one process and records every request for later replay.

{FACT} Ludo was drawn by the first contributor and appears on the project's stickers,
standing on one leg in shallow water.

The build runs on two cores. The full test suite takes about half an hour there, so
contributors run the tests of the files they touch and leave the whole suite to CI.

Release notes are written by hand. Each release names the clients it was tried with, the
models it was measured on, and the figures that changed since the previous release.
"""
QUESTION = "What is the name of the Prism project's mascot?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Http:
    """JSON over urllib, with Open WebUI's bearer token once signed in."""

    def __init__(self, base: str) -> None:
        self.base, self.token = base, ""

    def call(self, method: str, path: str, body=None, timeout: float = 60, raw=False,
             data: bytes | None = None, headers: dict | None = None):
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        payload = data if data is not None else (json.dumps(body).encode()
                                                 if body is not None else None)
        req = urllib.request.Request(self.base + path, data=payload, method=method,
                                     headers=hdrs)
        r = urllib.request.urlopen(req, timeout=timeout)
        return r if raw else json.loads(r.read() or b"null")


def wait_for(fn, seconds: float, what: str, deadline: float):
    end = min(time.monotonic() + seconds, deadline)
    last = None
    while time.monotonic() < end:
        try:
            if got := fn():
                return got
        except (OSError, ValueError) as e:
            last = e
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {seconds:g} s ({last})")


def stream_chat(owui: Http, body: dict, timeout: float) -> tuple[str, list]:
    """The streamed answer's text and the `sources` events of Open WebUI's reply."""
    r = owui.call("POST", "/api/chat/completions", {**body, "stream": True}, timeout=timeout,
                  raw=True)
    text, sources = [], []
    for line in r:
        line = line.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if "sources" in ev:
            sources.extend(ev["sources"])
        for choice in ev.get("choices") or []:
            text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text), sources


class Check:
    def __init__(self) -> None:
        self.rows: list[tuple[str, bool | None, str]] = []

    def add(self, name: str, ok: bool | None, detail: str) -> None:
        self.rows.append((name, ok, detail))
        mark = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
        print(f"  {mark}  {name}: {detail}", flush=True)

    def table(self) -> str:
        w = max(len(n) for n, _, _ in self.rows)
        lines = [f"{'check'.ljust(w)}  result  detail", f"{'-' * w}  ------  ------"]
        for n, ok, d in self.rows:
            lines.append(f"{n.ljust(w)}  {({True: 'pass', False: 'FAIL', None: 'skip'}[ok]):6}"
                         f"  {d}")
        return "\n".join(lines)


BROWSER = r"""
import sys, time
from playwright.sync_api import sync_playwright
base, model, work = sys.argv[1], sys.argv[2], sys.argv[3]
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
        "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"])
    page = b.new_page(viewport={"width": 1280, "height": 800})
    page.goto(base + "/?models=" + model, timeout=120000)
    page.wait_for_selector("#chat-input", timeout=120000)
    time.sleep(3)
    try:  # the release notes' modal, shown once to a new user, covers the page
        page.get_by_text("Okay, Let's Go!").click(timeout=5000)
    except Exception:
        pass
    page.screenshot(path=work + "/owui-home.png")
    print("LABELS", sorted({x for x in page.eval_on_selector_all(
        "button", "bs => bs.map(b => b.getAttribute('aria-label') || b.id || '')") if x}),
        flush=True)
    for sel in (f"button:has-text('{model[:20]}')", "button[aria-label*='model' i]",
                "button[aria-label*='Model']"):
        try:
            page.locator(sel).first.click(timeout=5000)
            break
        except Exception:
            continue
    time.sleep(2)
    page.screenshot(path=work + "/owui-models.png")
    listed = page.inner_text("body")
    print("LISTED", *[m for m in sys.argv[4:] if m in listed], flush=True)
    page.keyboard.press("Escape")
    before = page.inner_text("body")
    page.locator("#chat-input").click()
    page.keyboard.type("Say hello in one short sentence.")
    page.keyboard.press("Enter")
    text = ""
    for _ in range(360):
        time.sleep(0.5)
        boxes = page.locator("#response-content-container")
        if boxes.count():
            text = boxes.last.inner_text()
            if text.strip() and page.locator("button[aria-label='Stop']").count() == 0:
                break
    if not text.strip():
        text = "(no #response-content-container) " + page.inner_text("body")[len(before):]
    page.screenshot(path=work + "/owui-chat.png")
    print("ANSWER", text.replace("\n", " ")[:200], flush=True)
    b.close()
"""


def run(args: argparse.Namespace, work: Path, check: Check) -> None:
    from engine.chat.packs import load_pack

    deadline = time.monotonic() + args.budget
    models = work / "models"
    models.mkdir()
    smol_gguf, gemma_gguf = load_pack("smollm2").gguf, load_pack("gemma3-270m").gguf
    for g in (smol_gguf, gemma_gguf):
        os.symlink(g, models / g.name)
    smol, gemma = smol_gguf.stem, gemma_gguf.stem
    prism_port, owui_port = free_port(), args.owui_port or free_port()
    prism_log = (work / "prism.log").open("w")
    owui_log = (work / "openwebui.log").open("w")
    procs: list[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(prism_port), "--models-dir",
             str(models), "--models-max", "1", "--n-ctx", str(args.n_ctx), "--no-record",
             "--max-tokens", "96"],
            cwd=ROOT, stdout=prism_log, stderr=subprocess.STDOUT, start_new_session=True))
        prism = Http(f"http://127.0.0.1:{prism_port}")
        wait_for(lambda: prism.call("GET", "/health", timeout=5), 60, "prism /health", deadline)
        v1 = f"http://127.0.0.1:{prism_port}/v1"
        env = {**os.environ, "DATA_DIR": str(work / "owui-data"), "WEBUI_AUTH": "False",
               "WEBUI_SECRET_KEY": "prism-check", "ENABLE_OLLAMA_API": "False",
               "OPENAI_API_BASE_URLS": v1, "OPENAI_API_KEYS": "x",
               "OPENAI_API_CONFIGS": json.dumps({"0": {"enable": True,
                                                       "provider": "llama.cpp"}}),
               "RAG_EMBEDDING_ENGINE": "openai", "RAG_OPENAI_API_BASE_URL": v1,
               "RAG_OPENAI_API_KEY": "x", "RAG_EMBEDDING_MODEL": smol,
               # Small chunks and one retrieved: the right paragraph must win on similarity.
               "CHUNK_SIZE": "260", "CHUNK_OVERLAP": "0", "RAG_TOP_K": "1",
               # A 135M model cannot write the query JSON; the question itself is the query.
               "ENABLE_RETRIEVAL_QUERY_GENERATION": "False",
               "ENABLE_TITLE_GENERATION": "False", "ENABLE_TAGS_GENERATION": "False",
               "ENABLE_FOLLOW_UP_GENERATION": "False",
               "ENABLE_AUTOCOMPLETE_GENERATION": "False",
               "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "ANONYMIZED_TELEMETRY": "false", "DO_NOT_TRACK": "true",
               "SCARF_NO_ANALYTICS": "true", "ENABLE_VERSION_UPDATE_CHECK": "false"}
        (work / "owui-data").mkdir()
        procs.append(subprocess.Popen(
            [args.openwebui, "serve", "--host", "127.0.0.1", "--port", str(owui_port)],
            cwd=work, env=env, stdout=owui_log, stderr=subprocess.STDOUT,
            start_new_session=True))
        owui = Http(f"http://127.0.0.1:{owui_port}")
        t0 = time.monotonic()
        wait_for(lambda: owui.call("GET", "/health", timeout=5), 300, "open-webui /health",
                 deadline)
        print(f"open-webui up in {time.monotonic() - t0:.0f} s", flush=True)
        owui.token = owui.call("POST", "/api/v1/auths/signin",
                               {"email": "", "password": ""})["token"]
        steps(args, work, prism, owui, smol, gemma, prism_log.name, deadline, check)
    finally:
        for p in procs:  # our own sessions only, by their process group
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        prism_log.close()
        owui_log.close()


def listed(owui: Http) -> dict[str, dict]:
    return {m["id"]: m for m in owui.call("GET", "/api/models")["data"]}


def steps(args, work: Path, prism: Http, owui: Http, smol: str, gemma: str, prism_log: str,
          deadline: float, check: Check) -> None:
    # 1. The model list, with the llama.cpp provider's load state.
    got = listed(owui)
    both = all(m in got for m in (smol, gemma))
    check.add("1 models listed", both and all(got[m].get("provider") == "llama.cpp"
                                              and got[m].get("loaded") is False
                                              for m in (smol, gemma)),
              ", ".join(f"{m}: loaded={got[m].get('loaded')}" for m in (smol, gemma)
                        if m in got) or f"listed {sorted(got)}")

    # 2. Model management: load through Open WebUI, events through its /sse proxy, unload.
    events: list[dict] = []

    def listen() -> None:
        try:
            r = owui.call("GET", "/openai/models/0/sse", timeout=60, raw=True)
            for line in r:
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1].get("data", {}).get("status") == "unloaded":
                        return
        except OSError:
            pass

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    time.sleep(1)
    owui.call("POST", "/openai/models/0/load", {"model": gemma})
    try:
        wait_for(lambda: listed(owui)[gemma].get("loaded") is True, 120, "load", deadline)
        loaded_ok = True
    except TimeoutError as e:
        loaded_ok, why = False, str(e)
    owui.call("POST", "/api/models/unload", {"model": gemma})
    try:
        wait_for(lambda: listed(owui)[gemma].get("loaded") is False, 60, "unload", deadline)
        unloaded_ok = True
    except TimeoutError as e:
        unloaded_ok, why = False, str(e)
    listener.join(10)
    seen = [f"{e['model']}:{e['data']['status']}" for e in events if "data" in e]
    check.add("2 load via Open WebUI", loaded_ok,
              "POST /openai/models/0/load -> /api/models shows loaded=True" if loaded_ok
              else why)
    check.add("2 unload via Open WebUI", unloaded_ok,
              "POST /api/models/unload -> loaded=False" if unloaded_ok else why)
    check.add("2 /models/sse via Open WebUI", f"{gemma}:loaded" in seen
              and f"{gemma}:unloaded" in seen, " ".join(seen) or "no events")

    # 3. A streamed chat on each model (each loads on demand, evicting the other).
    for model in (smol, gemma):
        t = time.monotonic()
        try:
            text, _ = stream_chat(owui, {"model": model, "max_tokens": 48, "messages": [
                {"role": "user", "content": "Say hello in one short sentence."}]}, 240)
            state = prism.call("GET", "/v1/models")["data"]
            resident = [m["id"] for m in state if m["status"]["value"] == "loaded"]
            check.add(f"3 chat {model}", bool(text.strip()),
                      f"{time.monotonic() - t:.1f} s, {text.strip()[:60]!r}; "
                      f"resident {resident}")
        except (OSError, ValueError) as e:
            check.add(f"3 chat {model}", False, str(e)[:200])

    # 4. RAG through Prism's embeddings.
    before = Path(prism_log).read_text(errors="replace").count("POST /v1/embeddings")
    boundary = uuid.uuid4().hex
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"prism-notes.txt\"\r\nContent-Type: text/plain\r\n\r\n{DOCUMENT}\r\n"
            f"--{boundary}--\r\n").encode()
    try:
        f = owui.call("POST", "/api/v1/files/?process=true&process_in_background=false",
                      data=form, timeout=300,
                      headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        status = owui.call("GET", f"/api/v1/files/{f['id']}/process/status?stream=false")
        calls = Path(prism_log).read_text(errors="replace").count("POST /v1/embeddings")
        check.add("4 upload embedded by Prism", status.get("status") == "completed"
                  and calls > before, f"file {status.get('status')}, {calls - before} "
                  "POST /v1/embeddings in Prism's log")
        text, sources = stream_chat(owui, {"model": smol, "max_tokens": 64, "messages": [
            {"role": "user", "content": QUESTION}], "files": [{"type": "file", "id": f["id"]}]},
            300)
        docs = [d for s in sources for d in s.get("document") or []]
        hit = any("heron named Ludo" in d for d in docs)
        calls2 = Path(prism_log).read_text(errors="replace").count("POST /v1/embeddings")
        check.add("4 retrieval found the fact", hit,
                  f"{len(docs)} chunk(s) retrieved, query embedded by Prism "
                  f"({calls2 - calls} more call(s)): {(docs[0] if docs else '')[:70]!r}")
        check.add("4 answer names Ludo", "ludo" in text.lower(), f"{text.strip()[:90]!r}")
    except (OSError, ValueError, KeyError) as e:
        check.add("4 RAG", False, str(e)[:200])

    # 5. The page itself, in headless Chromium.
    if not args.browser:
        check.add("5 browser", None, "not asked (--browser)")
        return
    py = Path(args.openwebui).parent / "python"
    try:
        out = subprocess.run([str(py), "-c", BROWSER, owui.base, smol, str(work), smol, gemma],
                             capture_output=True, text=True,
                             timeout=max(30, min(420, deadline - time.monotonic())))
        lines = out.stdout.splitlines()
        shown = next((ln.split()[1:] for ln in lines if ln.startswith("LISTED")), [])
        answer = next((ln[7:] for ln in lines if ln.startswith("ANSWER")), "")
        check.add("5 browser model chooser", sorted(shown) == sorted([smol, gemma]),
                  f"listed {shown}; {work / 'owui-models.png'}" if shown
                  else out.stderr.strip()[-200:])
        check.add("5 browser chat", bool(answer.strip()),
                  f"{answer[:60]!r}; {work / 'owui-chat.png'}" if answer
                  else out.stderr.strip()[-200:])
    except subprocess.TimeoutExpired:
        check.add("5 browser", False, "timed out")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--openwebui", default="/tmp/owui-venv/bin/open-webui",
                   help="the open-webui command (its venv's python runs the browser step)")
    p.add_argument("--owui-port", type=int, default=0, help="Open WebUI's port (0: a free one)")
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--browser", action="store_true",
                   help="also drive the page in headless Chromium (Playwright)")
    p.add_argument("--budget", type=float, default=1200, help="seconds for the whole run")
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs, shots)")
    args = p.parse_args()
    if not Path(args.openwebui).exists():
        print(f"no {args.openwebui}: see this script's docstring for the setup")
        return 2
    work = Path(tempfile.mkdtemp(prefix="prism-owui-"))
    check = Check()
    try:
        run(args, work, check)
    except (OSError, TimeoutError, ValueError) as e:
        check.add("setup", False, str(e)[:200])
    finally:
        print("\n" + check.table())
        failed = [n for n, ok, _ in check.rows if ok is False]
        passed = sum(ok is True for _, ok, _ in check.rows)
        print(f"\nopenwebui_check: {passed} passed, {len(failed)} failed"
              + (f" ({', '.join(failed)})" if failed else "") + f"; logs in {work}")
        if not args.keep and not failed:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
