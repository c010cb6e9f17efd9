"""Generate tests/engine/chat/golden/compat.json with transformers (5.x) as the renderer.

Each case: a real template of llama.cpp's library (../shared/templates), the conversation as
Message.to_template() dicts (what Prism's ChatTemplate gets), tools, bos/eos, and `expected`:
transformers' render_jinja_template output, with only the change the case's `reference` names
(where transformers refuses what llama.cpp runs)."""
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from jinja2.sandbox import SandboxedEnvironment
from transformers.utils import chat_template_utils as ctu
from transformers.utils.chat_template_utils import render_jinja_template

T = ROOT.parent / "shared" / "templates"
OUT = ROOT / "tests/engine/chat/golden/compat.json"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city. Température in °C.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "days": {"type": "integer", "enum": [1, 2, 3], "description": "Days ahead"}}, "required": ["city"]}}}
WRITE = {"type": "function", "function": {
    "name": "write_file", "description": "Write a file.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "text": {"type": "string"}}, "required": ["path", "text"]}}}

def call(i, name, **args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}

SYSTEM = {"role": "system", "content": "You are terse. Use tools when they help."}
USER = {"role": "user", "content": "Weather in Paris and Zürich?"}
TWO_CALLS = {"role": "assistant", "content": "Checking both.",
             "tool_calls": [call(1, "get_weather", city="Paris"), call(2, "get_weather", city="Zürich", days=2)]}
RESULT1 = {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1", "name": "get_weather"}
RESULT2 = {"role": "tool", "content": "{\"temp\": 14}", "tool_call_id": "call_2", "name": "get_weather"}
FINAL = {"role": "assistant", "content": "Paris 21 °C, Zürich 14 °C."}
AGAIN = {"role": "user", "content": "And tomorrow?"}
KIMI_CHAT = [SYSTEM, USER, TWO_CALLS, RESULT1, RESULT2, FINAL, AGAIN]
ONE_CALL = {"role": "assistant", "content": "", "tool_calls": [call(1, "get_weather", city="Zürich", days=2)]}
FUNC_CHAT = [SYSTEM, USER, ONE_CALL, RESULT1]

def stringified(chat):
    out = copy.deepcopy(chat)
    for m in out:
        for c in m.get("tool_calls", ()):
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"], ensure_ascii=False)
    return out

def merged(chat):  # llama.cpp's system_message_not_supported: system + "\n" + next user text
    chat = copy.deepcopy(chat)
    if chat and chat[0]["role"] == "system":
        sys_msg, rest = chat[0], chat[1:]
        if rest and rest[0]["role"] == "user":
            rest[0]["content"] = sys_msg["content"] + "\n" + rest[0]["content"]
            return rest
        return [{"role": "user", "content": sys_msg["content"]}, *rest]
    return chat

def tf(src, chat, tools, bos, eos, env_patch=None):
    compiled = ctu._compile_jinja_template(src)
    env = compiled.environment
    saved = dict(env.__dict__)
    if env_patch:
        env_patch(env)
    try:
        out, _ = render_jinja_template([copy.deepcopy(chat)], tools=copy.deepcopy(tools), chat_template=src,
                                       add_generation_prompt=True, bos_token=bos, eos_token=eos)
        return {"expected": out[0]}
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}
    finally:
        env.__dict__.clear(); env.__dict__.update(saved)

def mutable(env):  # SandboxedEnvironment's attribute rule: list.append/pop allowed
    env.is_safe_attribute = lambda obj, attr, value: SandboxedEnvironment.is_safe_attribute(env, obj, attr, value)

def listing_tojson(env):
    old = env.filters["tojson"]
    def tojson(x, *a, **k):
        if not isinstance(x, (str, dict, list, tuple)) and hasattr(x, "__iter__"):
            x = list(x)
        return old(x, *a, **k)
    env.filters = {**env.filters, "tojson": tojson}

cases = []
def case(name, item, template, chat, tools, bos, eos, reference, *, given=None, patch=None):
    src = (T / template).read_text(encoding="utf-8")
    res = tf(src, given if given is not None else chat, tools, bos, eos, patch)
    cases.append({"name": name, "item": item, "template": template, "messages": chat,
                  "tools": tools, "bos_token": bos, "eos_token": eos, "reference": reference, **res})

TF = "transformers render_jinja_template, unchanged"
MUT = ("transformers render_jinja_template with its sandbox's immutability lifted (it refuses "
       "list.append: 'access to attribute append of list object is unsafe')")
for t in ("Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja"):
    chat = copy.deepcopy(KIMI_CHAT)
    if "Thinking" in t:
        chat[5] = {**chat[5], "reasoning_content": "Both answered."}
    case(f"kimi_namespace_append:{t}", 1, t, chat, [WEATHER], "[BOS]", "[EOS]",
         TF if t.startswith("moonshotai") else MUT, patch=None if t.startswith("moonshotai") else mutable)
case("tojson_of_a_generator:llama-cpp-deepseek-r1", 2, "llama-cpp-deepseek-r1.jinja",
     [SYSTEM, USER], [WEATHER, WRITE], "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
     "transformers render_jinja_template, its tojson listing a generator first (json.dumps "
     "refuses one: 'Object of type generator is not JSON serializable')", patch=listing_tojson)
case("string_arguments:functionary-v3.2", 3, "meetkai-functionary-medium-v3.2.jinja",
     FUNC_CHAT, [WEATHER], "<|begin_of_text|>", "<|eot_id|>",
     "transformers render_jinja_template given the arguments as the JSON string an OpenAI "
     "client sends (json.dumps, ensure_ascii=False); given decoded it raises TypeError: can "
     "only concatenate str (not \"dict\") to str", given=stringified(FUNC_CHAT))
GEMMA_REF = ("transformers render_jinja_template of the conversation merged as llama.cpp's "
             "common/chat.cpp merges it (system text + \"\\n\" + first user text); given the "
             "system message it raises 'System role not supported'")
for name, chat in (("system_then_user", [SYSTEM, USER]),
                   ("system_then_turns", [SYSTEM, USER, FINAL, AGAIN]),
                   ("system_alone", [SYSTEM])):
    case(f"system_merged:gemma-2:{name}", 4, "google-gemma-2-2b-it.jinja", chat, None,
         "<bos>", "<eos>", GEMMA_REF, given=merged(chat))
for t, bos, eos in (("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
                    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
                    ("meetkai-functionary-medium-v3.1.jinja", "<|begin_of_text|>", "<|eot_id|>"),
                    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
                    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>"),
                    ("ibm-granite-granite-4.0.jinja", "", "<|end_of_text|>"),
                    ("MiniMax-M1.jinja", "", ""),
                    ("unsloth-Apriel-1.5.jinja", "<s>", "</s>"),
                    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
                    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
                    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
                    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>")):
    stem = t.removesuffix(".jinja")
    case(f"tools_none:{stem}", 5, t, [SYSTEM, USER], None, bos, eos, TF)
    case(f"tools_given:{stem}", 5, t, [SYSTEM, USER], [WEATHER], bos, eos, TF)

OUT.write_text(json.dumps({"about": __doc__.strip(), "cases": cases}, ensure_ascii=False, indent=1) + "\n",
               encoding="utf-8")
for c in cases:
    print(c["name"], "ERR " + c["error"] if "error" in c else len(c["expected"]))
print(OUT.stat().st_size)
