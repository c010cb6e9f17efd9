"""engine/backends/llama/kv_plan.py: the default context is the model's trained context, capped by
a memory budget for its KV cache, computed from the real default model's GGUF metadata."""

from __future__ import annotations

from pathlib import Path

from engine.backends.llama.kv_plan import STEP, KVLayout, kv_bytes_per_token, plan_context, plan_kv
from engine.gguf import read_gguf_metadata

# SmolLM2-135M: 30 layers, 3 KV heads of 64 dimensions, K and V in f16.
SMOL_KV = 30 * 3 * (64 + 64) * 2


def test_the_trained_context_when_the_budget_allows(default_model: Path):
    plan = plan_context(default_model, budget=2**30)
    assert (plan.n_ctx, plan.trained, plan.kv_per_token) == (8192, 8192, SMOL_KV)
    assert not plan.capped
    assert plan.describe() == ("context 8192 tokens, the model's trained context; its KV cache "
                               "takes 180 MiB")


def test_capped_by_the_budget_to_a_multiple_of_the_step(default_model: Path):
    budget = 50 * 2**20
    plan = plan_context(default_model, budget=budget)
    assert plan.capped and plan.n_ctx % STEP == 0
    assert plan.n_ctx * SMOL_KV <= budget < (plan.n_ctx + STEP) * SMOL_KV
    assert "trained for 8192" in plan.describe() and "--n-ctx N" in plan.describe()


def test_the_default_budget_is_a_quarter_of_the_memory(default_model: Path):
    plan = plan_context(default_model)
    assert "quarter" in plan.budget_origin and plan.budget > 0


def test_kv_bytes_per_token_reads_grouped_and_per_layer_heads(default_model: Path):
    meta = read_gguf_metadata(default_model)
    assert kv_bytes_per_token(meta) == SMOL_KV
    per_layer = {**meta, "llama.attention.head_count_kv": [3] * 10 + [0] * 20}
    assert kv_bytes_per_token(per_layer) == SMOL_KV // 3
    assert kv_bytes_per_token({"general.architecture": "llama"}) is None


def test_a_file_without_metadata_gets_the_fallback(tmp_path: Path):
    bogus = tmp_path / "x.gguf"
    bogus.write_bytes(b"not a gguf")
    plan = plan_context(bogus, budget=2**30)
    assert (plan.n_ctx, plan.trained, plan.kv_per_token) == (4096, None, None)
    assert "names no trained context" in plan.describe()


def test_split_caches_when_n_of_them_fit_the_budget_else_one_pool():
    one = 8192 * SMOL_KV  # 180 MiB
    split = plan_kv(8192, 4, SMOL_KV, budget=4 * one)
    assert (split.unified, split.total) == (False, 4 * one)
    assert split.reason == "4 caches of 180 MiB fit the memory budget of 720 MiB"
    pool = plan_kv(8192, 4, SMOL_KV, budget=4 * one - 1)
    assert (pool.unified, pool.total) == (True, one)
    assert "would pass the memory budget" in pool.reason
    # One sequence is the single context it always was; an unknown size takes the pool.
    assert plan_kv(8192, 1, SMOL_KV, budget=10**12).unified
    assert plan_kv(8192, 4, None, budget=10**12).unified


def test_the_layout_flag_overrides_the_budget():
    assert not plan_kv(8192, 4, SMOL_KV, budget=1, layout=KVLayout.SPLIT).unified
    assert plan_kv(8192, 4, SMOL_KV, budget=10**12, layout=KVLayout.UNIFIED).unified
    assert KVLayout("auto") is KVLayout.AUTO
