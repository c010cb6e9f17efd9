"""The shape engines: one call syntax described once (`CallFormat`), read, written and forced.

A family whose calls fit a shape is a record (engine/parse/shapes/record.py) handed to
`shape_family` (engine/parse/shapes/build.py), which makes its streaming reader, writer and
forced-call grammar from that record with the shape's engine: `tagged.py` (key/value parameters
between tags: Qwen XML's writer, GLM, MiniMax, DSML), `json_object.py` (one JSON call object in
a wrapper: Hermes, Llama 3, GigaChat 3), `json_list.py` (a JSON list of call objects: Command
R7B, the bare `json-list` format, FireFunction, Mistral's older list), `python_calls.py` (a list
of Python calls: LFM2, `pythonic`, `pythonic-tagged`) and `name_json.py` (a name in markers, one
JSON arguments object: DeepSeek, Kimi K2, Mistral's `NAME[ARGS]{…}`, Functionary). The seeds'
rules (where a call may start, held-back text, chunking-independence, anomalies) stay in the one
parser (engine/parse/parser.py), which every engine's reader serves. Pure Python, standard
library only; read by any thread.
"""

# The engines build on the readers' shared base in engine/parse/families (common.py,
# framed.py, hermes_json.py' scanner, registry.py), whose package imports every family, and the
# families import these engines: importing that package first, whichever module is imported
# first, lets each side find the other whole.
import engine.parse.families  # noqa: F401  (import order, see above)
