"""Drives one family's call-body reader directly (no OutputParser around it): whole, one
character at a time and in random chunks, and checks what every chunking must agree on."""

from __future__ import annotations

import json

from tests.engine.parse.parser_harness import random_chunks


def read(mod, body: str, chunks=None, *, schemas=None, stream: bool = True, eof: bool = True):
    """Feed `body` to a fresh `mod.CallParser` (in `chunks` sizes, else whole); `finish()` at
    the end when `eof`. Returns the reader."""
    p = mod.CallParser(schemas or {}, stream)
    if chunks is None:
        p.feed(body)
    else:
        i = 0
        for n in chunks:
            if p.done or p.error:
                break
            p.feed(body[i : i + n])
            i += n
        if not (p.done or p.error):
            p.feed(body[i:])
    if eof:
        p.finish()
    return p


def outcome(p) -> tuple:
    """What must not depend on the chunking: the outcome and the streamed text joined."""
    args = "".join(t for k, t, _ in p.out if k == "args")
    starts = [(t, end) for k, t, end in p.out if k == "start"]
    return (p.done, p.end if p.done else None, p.error, p.resume, p.name, p.arguments,
            starts, args)


def read_all_ways(mod, body: str, *, schemas=None, eof: bool = True, seeds=(1, 2, 3)):
    """Read `body` whole, per character and in random chunks, stream on and off. Asserts the
    outcomes agree, the streamed fragments are in order, and that a completed call's
    fragments join to exactly json.dumps(arguments). Returns the whole-fed, streaming reader."""
    ref = read(mod, body, schemas=schemas, eof=eof)
    variants = [[1] * len(body)] + [random_chunks(body, s) for s in seeds]
    for chunks in variants:
        got = read(mod, body, chunks, schemas=schemas, eof=eof)
        assert outcome(got) == outcome(ref), chunks[:20]
        ends = [end for _, _, end in got.out]
        assert ends == sorted(ends), "streamed items out of order"
    quiet = read(mod, body, schemas=schemas, stream=False, eof=eof)
    assert quiet.out == []
    assert outcome(quiet)[:6] == outcome(ref)[:6], "stream changed the outcome"
    if ref.done:
        assert outcome(ref)[7] == json.dumps(ref.arguments)
    return ref
