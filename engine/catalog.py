"""Several models behind one server: which are resident, which load next, which go.

Owns `Catalog`, its `Lease`s, `ModelStatus` and `CatalogEvent`. Each model
(engine/catalog_files.py, `ModelSpec`) is `unloaded`, `loading`, `loaded` or `failed`; a
loaded one is a `Service` built as a single model's is (the `build` function the app gives).
A request takes a `Lease` on its model: granted at once when the model is resident, else the
model is wanted and loaded, and the request waits (`want`/`lease`, or `acquire` blocking).

Residency: the models resident (or loading) must fit `max_memory` bytes, by the memory plan
(`estimate(spec)` before a load: weights + KV + buffers; the engine's own KV size after), and
`max_models` when given. To make room the least recently used model goes first, but never a
pinned one and never one with a request running, queued or holding a lease: that model is
*draining* instead (no new leases; its waiters queue behind the newcomer) and the newcomer
waits until it is idle. A model idle longer than its `ttl` is unloaded. A load that fails (a
corrupt file, a model larger than the limit) marks that model `failed` with why; the others
keep serving; an explicit `load()` tries again. Before room is made for a model, the app's
cheap `check(spec)` (a truncated file, say) runs on the loader thread, outside the lock: a file
that fails it is `failed` at once, and no resident model was evicted for it.

Threads: one loader thread ("prism-catalog") builds, loads and closes engines, so no caller
(the HTTP loop above all) ever waits on a load it did not ask to wait for. `lease`, `want`,
`unwant`, `load`, `unload`, `statuses` from any thread, under one lock held only for
bookkeeping. Listeners (`add_listener`) are called on the loader thread and must only enqueue.
Service watchers (`watch_services`) are called there too, with a model's new service before
any request can reach it (so they miss none of its runs) and with None once it is closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from engine.catalog_files import ModelSpec
from engine.service import RunUpdate, Service

log = logging.getLogger("prism")

UNLOADED, LOADING, LOADED, FAILED = "unloaded", "loading", "loaded", "failed"
BUFFERS = 64 * 2**20  # llama.cpp's compute and output buffers, counted with every model


class UnknownModel(LookupError):
    """No model of the catalog answers to this name; `names` are the ids there are."""

    def __init__(self, name: str, names: list[str]) -> None:
        super().__init__(f"the model {name!r} does not exist; this server has "
                         f"{', '.join(repr(n) for n in names)}")
        self.name, self.names = name, names


class ModelFailed(RuntimeError):
    """The model's last load failed (the message says why)."""


@dataclass(frozen=True, slots=True)
class ModelStatus:
    id: str
    state: str  # unloaded | loading | loaded | failed
    error: str  # why the last load failed ("" otherwise)
    size: int  # bytes of its GGUF file(s)
    memory: int  # bytes it takes (estimated until loaded)
    n_ctx: int  # tokens one request may use (planned until loaded)
    pinned: bool
    aliases: tuple[str, ...]
    loads: int  # how many times it was loaded
    busy: int  # requests running, queued or about to be
    draining: bool  # waits to be unloaded: no new requests until it is
    last_used: float  # time.monotonic() of its last request (0: never)


@dataclass(frozen=True, slots=True)
class CatalogEvent:
    model: str
    kind: str  # loading | loaded | failed | unloaded
    status: ModelStatus
    reason: str = ""  # unloaded: evicted | ttl | asked | closed


class _Entry:
    def __init__(self, spec: ModelSpec, memory: int, n_ctx: int) -> None:
        self.spec = spec
        self.state = UNLOADED
        self.error = ""
        self.service: Service | None = None
        self.memory, self.n_ctx = memory, n_ctx  # the model's own plan (weights, KV, buffers)
        self.loads = 0
        self.leases = 0  # granted, not yet a run (or a raw job) in the engine
        self.active = 0  # runs started and not finished
        self.wanted = 0  # requests waiting for it
        self.asked = False  # an explicit load()
        self.asked_at = 0.0  # when it began to wait for a load (first come, first loaded)
        self.unload_asked = False
        self.draining = False
        self.checked = False  # passed the check for the load it waits for
        self.last_used = 0.0

    @property
    def busy(self) -> int:
        return self.leases + self.active

    @property
    def held(self) -> int:
        """The bytes it holds: its plan, and its embedding worker's copy of the weights once
        a /v1/embeddings request has loaded it (engine/backends/llama/embed.py)."""
        service = self.service
        embedder = service.embedder if service is not None else None
        return self.memory + (embedder.memory if embedder is not None else 0)


class Lease:
    """One request's hold on a loaded model: it is not evicted until the lease ends. The
    chat APIs release it once `Service.submit` returned (the run then counts as active until
    it finishes); a raw job `bind`s it, to end with the job."""

    def __init__(self, catalog: Catalog, entry: _Entry) -> None:
        self._catalog, self._entry = catalog, entry
        self.service: Service = entry.service  # type: ignore[assignment]
        self.model = entry.spec.id
        self._open = True

    def release(self) -> None:
        with self._catalog._cond:
            if self._open:
                self._open = False
                self._entry.leases -= 1
                self._entry.last_used = time.monotonic()
                self._catalog._cond.notify_all()

    def bind(self, job) -> None:
        """End the lease when `job` finishes (its on_finish, on the engine's thread)."""
        done = job.on_finish

        def finished(fin) -> None:
            try:
                done(fin)
            finally:
                self.release()

        job.on_finish = finished


class Catalog:
    """See the module docstring."""

    def __init__(self, specs: list[ModelSpec], build: Callable[[ModelSpec], Service],
                 estimate: Callable[[ModelSpec], tuple[int, int]], *, max_memory: int,
                 max_models: int | None = None,
                 check: Callable[[ModelSpec], None] | None = None) -> None:
        """`check(spec)` raises (an Exception or SystemExit, its message the reason) when
        the model's file cannot load: run before anything is evicted for it."""
        self._build = build
        self._check = check
        self.max_memory, self.max_models = max_memory, max_models
        self._entries: dict[str, _Entry] = {}
        self._names: dict[str, _Entry] = {}
        for spec in specs:
            memory, n_ctx = estimate(spec)
            e = self._entries[spec.id] = _Entry(spec, memory, n_ctx)
            for n in spec.names:
                self._names[n] = e
        self._cond = threading.Condition()
        self._listeners: list[Callable[[CatalogEvent], None]] = []
        self._watchers: list[Callable[[str, Service | None], None]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="prism-catalog", daemon=True)
        self._thread.start()

    # -- any thread --------------------------------------------------------------------------

    @property
    def ids(self) -> list[str]:
        return list(self._entries)

    def resolve(self, name: str) -> str:
        """The id `name` stands for (an id or an alias), or UnknownModel."""
        e = self._names.get(name)
        if e is None:
            raise UnknownModel(name, self.ids)
        return e.spec.id

    def add_listener(self, fn: Callable[[CatalogEvent], None]) -> None:
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[CatalogEvent], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def watch_services(self, fn: Callable[[str, Service | None], None]) -> None:
        """fn(model, service) once a model's service is built, before it takes a request;
        fn(model, None) once it is closed (the loader thread; fn must only record it)."""
        self._watchers.append(fn)

    def unwatch_services(self, fn: Callable[[str, Service | None], None]) -> None:
        if fn in self._watchers:
            self._watchers.remove(fn)

    def _tell(self, model: str, service: Service | None) -> None:
        for fn in list(self._watchers):
            try:
                fn(model, service)
            except Exception:
                log.exception("[prism] a catalog service watcher failed")

    def statuses(self) -> list[ModelStatus]:
        with self._cond:
            return [self._status(e) for e in self._entries.values()]

    def status(self, name: str) -> ModelStatus:
        with self._cond:
            return self._status(self._entry(name))

    def spec(self, name: str) -> ModelSpec:
        return self._entry(name).spec

    def services(self) -> list[tuple[str, Service]]:
        """The resident models' services (for counts over the whole server)."""
        with self._cond:
            return [(e.spec.id, e.service) for e in self._entries.values()
                    if e.state == LOADED and e.service is not None]

    def lease(self, name: str) -> Lease | None:
        """A lease on the model if it is resident and not draining, else None (`want` it
        and wait for its next event). Raises UnknownModel, or ModelFailed after a failed
        load."""
        with self._cond:
            e = self._entry(name)
            if e.state == FAILED:
                raise ModelFailed(e.error)
            if e.state != LOADED or e.draining or e.service is None:
                return None
            e.leases += 1
            e.last_used = time.monotonic()
            return Lease(self, e)

    def want(self, name: str) -> None:
        """A request waits for the model: load it (making room) if it is not resident."""
        with self._cond:
            e = self._entry(name)
            if e.wanted == 0 and not e.asked:
                e.asked_at = time.monotonic()
            e.wanted += 1
            self._cond.notify_all()

    def unwant(self, name: str) -> None:
        with self._cond:
            e = self._entry(name)
            e.wanted = max(0, e.wanted - 1)
            self._cond.notify_all()

    def acquire(self, name: str, timeout: float | None = None) -> Lease:
        """Block until the model is resident and leased (TimeoutError past `timeout`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.want(name)
        try:
            with self._cond:
                while (lease := self.lease(name)) is None:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"the model {name!r} did not load in {timeout} s")
                    self._cond.wait(left)
                return lease
        finally:
            self.unwant(name)

    def load(self, name: str) -> None:
        """Load the model (POST /models/load): a failed one is tried again."""
        with self._cond:
            e = self._entry(name)
            if e.state == FAILED:
                e.state, e.error = UNLOADED, ""
            e.unload_asked = False
            if e.state == UNLOADED and not e.asked:
                e.asked, e.asked_at = True, time.monotonic()
            self._cond.notify_all()

    def pin(self, name: str, on: bool = True) -> None:
        """Pin the model (never evicted, no ttl) or let it go again; a pinned model that
        is not resident is not loaded by this."""
        with self._cond:
            e = self._entry(name)
            e.spec = replace(e.spec, pin=on)
            self._cond.notify_all()

    def unload(self, name: str) -> None:
        """Unload the model (POST /models/unload) once its requests are done."""
        with self._cond:
            e = self._entry(name)
            e.asked = False
            if e.state in (LOADED, LOADING):
                e.unload_asked = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the loader and close every resident model's engine."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(60)
        with self._cond:
            resident = [e for e in self._entries.values() if e.service is not None]
        for e in resident:
            self._unload(e, "closed")

    # -- bookkeeping (the lock is held) --------------------------------------------------------

    def _entry(self, name: str) -> _Entry:
        e = self._names.get(name)
        if e is None:
            raise UnknownModel(name, self.ids)
        return e

    def _status(self, e: _Entry) -> ModelStatus:
        return ModelStatus(e.spec.id, e.state, e.error, e.spec.size, e.held, e.n_ctx,
                           e.spec.pin, e.spec.aliases, e.loads, e.busy, e.draining,
                           e.last_used)

    def _emit(self, e: _Entry, kind: str, reason: str = "") -> None:
        with self._cond:
            event = CatalogEvent(e.spec.id, kind, self._status(e), reason)
            self._cond.notify_all()
        log.info("[prism] model %s: %s%s", e.spec.id, kind, f" ({reason})" if reason else "")
        for fn in list(self._listeners):
            try:
                fn(event)
            except Exception:
                log.exception("[prism] a catalog listener failed")

    def _on_update(self, e: _Entry, upd: RunUpdate) -> None:
        # A service listener: "start" on the submitting thread, "finish" on the engine's.
        if upd.kind not in ("start", "finish"):
            return
        with self._cond:
            e.active += 1 if upd.kind == "start" else -1
            e.last_used = time.monotonic()
            self._cond.notify_all()

    def _next(self) -> tuple[Callable[[], None] | None, float | None]:
        """What the loader does next (and the state changes that say so), or None and how
        long it may sleep."""
        now = time.monotonic()
        entries = list(self._entries.values())
        for e in entries:
            e.draining = e.unload_asked and e.state == LOADED
        for e in entries:  # asked to go, or idle past the ttl
            if e.state != LOADED or e.busy:
                continue
            if e.unload_asked:
                return self._going(e, "asked"), None
            if e.spec.ttl and not e.spec.pin and now - e.last_used >= e.spec.ttl:
                return self._going(e, "ttl"), None
        waiting = sorted((e for e in entries if e.state == UNLOADED and (e.wanted or e.asked)),
                         key=lambda e: e.asked_at)
        if waiting:
            e = waiting[0]
            if self._check is not None and not e.checked:
                return (lambda: self._run_check(e)), None
            step = self._make_room(e)
            if step is not None:
                return step, None
        ttls = [e.spec.ttl - (now - e.last_used) for e in entries
                if e.state == LOADED and e.spec.ttl and not e.spec.pin and not e.busy]
        return None, (max(0.05, min(ttls)) if ttls else None)

    def _make_room(self, e: _Entry) -> Callable[[], None] | None:
        resident = [r for r in self._entries.values() if r.state in (LOADED, LOADING)]
        used = sum(r.held for r in resident)

        def fits(gone: list[_Entry]) -> bool:
            n = len(resident) - len(gone) + 1
            mem = used - sum(g.held for g in gone) + e.memory
            return mem <= self.max_memory and (self.max_models is None or n <= self.max_models)

        victims: list[_Entry] = []
        for r in sorted((r for r in resident if r.state == LOADED and not r.spec.pin),
                        key=lambda r: r.last_used):
            if fits(victims):
                break
            victims.append(r)
        if not fits(victims):
            if any(r.state == LOADING for r in resident):
                return None  # wait for that load: its memory is then known
            pinned = sum(r.held for r in resident if r.spec.pin)
            e.state = FAILED
            e.error = (f"not enough memory: the model needs {e.memory / 2**20:.0f} MiB, and "
                       f"{(self.max_memory - pinned) / 2**20:.0f} MiB of the limit of "
                       f"{self.max_memory / 2**20:.0f} MiB is not pinned (--models-max-memory)"
                       if self.max_models is None or self.max_models > 0
                       else "--models-max is 0")
            e.asked = False
            return lambda: self._emit(e, "failed")
        busy = [v for v in victims if v.busy]
        if busy:  # never cut a request off: they finish, then go
            for v in busy:
                v.draining = True
            return None
        for v in victims:
            v.state = UNLOADED
        e.state, e.asked, e.checked = LOADING, False, False
        e.loads += 1

        def step() -> None:
            for v in victims:
                self._unload(v, "evicted")
            self._load(e)

        return step

    def _going(self, e: _Entry, reason: str) -> Callable[[], None]:
        e.state, e.unload_asked = UNLOADED, False
        return lambda: self._unload(e, reason)

    # -- loader thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                step, sleep = self._next()
                if step is None:
                    self._cond.wait(sleep)
                    continue
            try:
                step()
            except Exception:
                log.exception("[prism] the catalog's loader failed a step")

    def _run_check(self, e: _Entry) -> None:
        """The app's check of a model about to load, before any room is made for it (a
        corrupt file must not push a resident model out and then fail)."""
        try:
            self._check(e.spec)  # type: ignore[misc]
        except (Exception, SystemExit) as err:
            with self._cond:
                if e.state != UNLOADED:
                    return
                e.state, e.error, e.asked = FAILED, str(err) or type(err).__name__, False
            log.warning("[prism] model %s cannot load: %s", e.spec.id, e.error)
            self._emit(e, "failed")
            return
        with self._cond:
            e.checked = True

    def _load(self, e: _Entry) -> None:
        self._emit(e, "loading")
        service = None
        try:
            service = self._build(e.spec)
            engine = service.engine
            if getattr(engine, "ready", None) is not None:
                engine.ready.wait()
            if getattr(engine, "load_error", None):
                raise RuntimeError(engine.load_error)
        except (Exception, SystemExit) as err:
            if service is not None:
                service.engine.close()
            with self._cond:
                e.state, e.error = FAILED, str(err) or type(err).__name__
            log.warning("[prism] model %s failed to load: %s", e.spec.id, e.error)
            self._emit(e, "failed")
            return
        service.add_listener(lambda upd: self._on_update(e, upd))
        self._tell(e.spec.id, service)
        kv = getattr(service.engine, "kv_bytes", 0)
        with self._cond:
            e.service, e.state, e.error = service, LOADED, ""
            e.n_ctx = service.engine.n_ctx
            if kv:  # the engine's own figure replaces the plan's
                e.memory = e.spec.size + kv + BUFFERS
            e.last_used = time.monotonic()
        self._emit(e, "loaded")

    def _unload(self, e: _Entry, reason: str) -> None:
        with self._cond:
            service, e.service = e.service, None
            e.state = FAILED if e.state == FAILED else UNLOADED
            if e.wanted:  # its waiters queue behind whoever it made room for
                e.asked_at = time.monotonic()
        if service is not None:
            service.engine.close()
            # Its embedding worker holds a second copy of the model: it goes too.
            if (embedder := getattr(service, "embedder", None)) is not None:
                embedder.close()
            self._tell(e.spec.id, None)
        self._emit(e, "unloaded", reason)
