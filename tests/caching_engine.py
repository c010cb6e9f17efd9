"""`CachingReplay`: a replay engine whose finishes report a prompt cache, as the llama engine's
do (issue 20), for the tests of everything downstream of `Finish.prefix` and the token sources
(service log line, recording, metrics, /metrics, the window) until, and besides, the real
engine's disk cache.

`cache(prompt)` is asked per job for (cached tokens, of those from disk, the PrefixMatch); the
replayed output, its timings and everything else are the `ReplayEngine`'s own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.backends.base import Finish, Job, PrefixMatch
from engine.record.replay import ReplayEngine

Cache = Callable[[str], tuple[int, int, PrefixMatch | None]]


class CachingReplay(ReplayEngine):
    def __init__(self, sources: Sequence[Path | str], cache: Cache, **kw) -> None:
        super().__init__(sources, **kw)
        self.cache = cache

    def submit(self, job: Job) -> None:
        cached, disk, prefix = self.cache(job.prompt)
        done = job.on_finish

        def finish(fin: Finish) -> None:
            t = fin.timings
            n = min(cached, t.prompt_tokens)
            done(dataclasses.replace(fin, prefix=prefix, timings=dataclasses.replace(
                t, cached_tokens=n, disk_tokens=min(disk, n))))

        job.on_finish = finish
        super().submit(job)
