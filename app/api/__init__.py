"""The local HTTP server: OpenAI, Anthropic and Responses APIs over one engine service.

FastAPI + uvicorn, no Qt. `server.create_app(state)` builds the app; `server.serve(state)` runs
it in the current asyncio loop (the CLI's, or the GUI's qasync loop). One module per concept:
openai.py, anthropic.py, responses.py (the APIs), metrics.py, errors.py, and the shared
pieces convert.py (request bodies), blocks.py (events -> blocks), runs.py (submit and wait),
sse.py (streaming).
"""
