"""engine/backends/llama/vocab.py on the default model's vocabulary: our linear tokenizer gives
llama.cpp's own tokens, and a prompt that cannot fit is refused from its size alone. No timings
here: bench/abuse.py measures how long the worst bodies take."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.backends.llama.vocab import PromptTooLong, Vocab

pytestmark = pytest.mark.model

TEXTS = [
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi  there "
    "<|im_end|>\n<|im_start|>assistant\n",
    "plain text 🙂 é 你好 ✓",
    "",
    "<|im_start|><|im_end|>x<|endoftext|>",
    "  <|im_start|>  a  <|im_end|>  \n\n",
    "<|im_start|" * 3 + "|im_end|>",  # near-misses stay text
    "<|im_start|>user\nword<|im_end|>\n" * 50,
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call><|im_end|>",
]


@pytest.fixture(scope="module")
def vocab(default_model: Path) -> Iterator[Vocab]:
    v = Vocab(default_model)
    yield v
    v.close()


@pytest.mark.parametrize("text", TEXTS)
def test_tokens_match_llama_cpp(vocab: Vocab, text: str) -> None:
    assert vocab.tokenize(text) == vocab.tokenize_llama(text)


def test_special_tokens_are_parsed_and_counted_once(vocab: Vocab) -> None:
    body = "<|im_start|>" * 5000
    ids = vocab.tokenize(body)
    assert len(ids) == 5000 and len(set(ids)) == 1
    assert ids == vocab.tokenize_llama(body)


def test_a_prompt_that_cannot_fit_is_refused_from_its_size(vocab: Vocab) -> None:
    body = "<|im_start|>" * (8 * 1024 * 1024 // 12)  # 8 MiB of special tokens
    with pytest.raises(PromptTooLong) as e:
        vocab.tokenize(body, limit=4096)
    # The bound: bytes / the longest piece, before any tokenizing.
    assert e.value.at_least == -(-len(body) // vocab.longest_piece) >= 4096
    assert e.value.limit == 4096


def test_the_limit_is_checked_as_pieces_are_tokenized(vocab: Vocab) -> None:
    text = "<|im_start|>user\nword<|im_end|>\n" * 200  # 1,200 tokens, bound far below
    assert len(vocab.tokenize(text)) == 1200
    assert -(-len(text) // vocab.longest_piece) < 1000
    with pytest.raises(PromptTooLong) as e:
        vocab.tokenize(text, limit=1000)
    assert e.value.at_least >= 1000
    assert vocab.tokenize(text, limit=1201) == vocab.tokenize(text)


def test_closed_vocab_fails_in_python(default_model: Path) -> None:
    v = Vocab(default_model)
    v.close()
    with pytest.raises(RuntimeError, match="closed"):
        v.tokenize("x")
