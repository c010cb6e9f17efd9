"""Count the captured clients' first requests with the default model's tokenizer (docs/clients.md).

    .venv/bin/python scripts/count_client_prompts.py

For each request in tests/app/data/client_*.json (copies of ../shared/clients): how many tools
it declares, its system prompt in tokens (the system messages' text alone, SmolLM2's GGUF
vocabulary), the whole prompt as the default pack's template renders it (tools included), and
what the replay's old text split made of that prompt. Runs on the main thread, no model loaded
(a vocab-only llama.cpp model; the
server's own rendering, engine/service.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.api.openai import ChatBody, to_chat_request  # noqa: E402
from engine.backends.llama.vocab import Vocab  # noqa: E402
from engine.chat.packs import resolve_pack  # noqa: E402
from engine.record.replay import ReplayEngine, split_text  # noqa: E402
from engine.service import Service  # noqa: E402


def system_text(body: dict) -> str:
    parts = []
    for m in body["messages"]:
        if m["role"] in ("system", "developer"):
            c = m["content"]
            parts.append(c if isinstance(c, str) else "".join(p.get("text", "") for p in c))
    return "".join(parts)


def main() -> None:
    pack = resolve_pack("smollm2", None)
    vocab = Vocab(pack.gguf)
    # The service renders as the server does (thinking, history repair); the engine only
    # counts, so a replay of nothing in particular will do.
    engine = ReplayEngine([__file__], tokenizer=vocab.tokenize)
    service = Service(engine, pack)
    print(f"{'client':16}{'tools':>6}{'system':>8}{'prompt':>8}{'split':>8}")
    for path in sorted((ROOT / "tests" / "app" / "data").glob("client_*.json")):
        captured = json.loads(path.read_text(encoding="utf-8"))
        if captured["path"] != "/v1/chat/completions":
            continue  # Claude Code's and Codex's: Messages and Responses, other shapes
        body = captured["body"]
        req = to_chat_request(ChatBody.model_validate(body))
        prompt = service.render(req)
        print(f"{path.stem[7:]:16}{len(body.get('tools') or ()):>6}"
              f"{len(vocab.tokenize(system_text(body))):>8}{len(vocab.tokenize(prompt)):>8}"
              f"{len(split_text(prompt)):>8}")
    engine.close()
    vocab.close()


if __name__ == "__main__":
    main()
