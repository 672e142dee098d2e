"""Each benchmark runs in a tiny configuration and writes the JSON fields its report promises.

No timing assertions: these only prove the suite runs and its results are well-formed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import __main__ as suite
from benchmarks import (
    agent_step,
    branches,
    buffering,
    cache_misses,
    import_time,
    own_work,
    prompt_cache,
    prompt_tokens,
    search,
    search_languages,
    step_cost,
    storage,
    token_counting,
    vector_restart,
    wirings,
)
from benchmarks.common import conversation, percentile, summary, turn_messages
from benchmarks.history import COLD_SAMPLES, PromptMeter, bench_counter

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _ns(module: Any, **overrides: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser, True)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_percentile_and_summary() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    stats = summary(values)
    assert stats["max"] == 100.0 and stats["n"] == 100.0 and stats["mean"] == pytest.approx(50.5)


def test_conversation_is_deterministic_and_tool_exchanges_stay_whole() -> None:
    first, second = conversation(200), conversation(200)
    assert [m.text for m in first] == [m.text for m in second]
    assert len({m.id for m in first}) == 200
    for index, message in enumerate(first):
        if message.type == "tool":
            assert getattr(first[index - 1], "tool_calls", None), "a tool result follows its call"


def test_prompt_meter_counts_the_shared_prefix() -> None:
    meter = PromptMeter(bench_counter())
    history = conversation(20)
    meter.measure(history[:10])
    total, share = meter.measure(history[:12])
    assert total > 0
    assert 0.5 < share < 1.0  # the first 10 messages are reused, the 2 new ones are not
    _, changed = meter.measure(history[5:12])
    assert changed < 0.2  # dropping the head breaks the prefix


def test_buffering_quick_produces_waits_and_ratios() -> None:
    args = _ns(buffering, turns=14, observer_delay=0.05, agent_delay=0.0, message_tokens=600,
               observation_tokens=2000)
    payload = asyncio.run(buffering.run(args))
    assert set(payload["strategies"]) == {"om-buffered", "om-sync", "summarization"}
    for data in payload["strategies"].values():
        assert data["wait_ms"]["n"] == 14
        assert data["wait_ms"]["p95"] >= data["wait_ms"]["p50"] >= 0
    assert payload["strategies"]["om-sync"]["observer_calls"] >= 1  # 14 turns cross 600 tokens
    assert payload["strategies"]["summarization"]["summaries"] >= 1
    for data in payload["strategies"].values():
        assert data["wait_ms"]["max"] >= data["wait_ms"]["mean"] >= 0
        assert 0 <= data["share_waiting_over_100ms"] <= 1
        assert data["steps_waiting_over_100ms"] == round(data["share_waiting_over_100ms"] * 14)
    for key in ("buffered_p95_over_sync_p95", "buffered_mean_over_sync_mean", "buffered_max_over_sync_max"):
        assert key in payload["ratios"]
    assert payload["params"]["message_tokens"] == 600 and payload["params"]["block_after"] == buffering.BLOCK_AFTER
    assert isinstance(payload["target"]["robust"], bool)
    text = buffering.report(payload)
    assert "buffered p95 / sync p95" in text and "buffered mean / sync mean" in text
    assert "message_tokens=600" in text and "observation_tokens=2000" in text


def test_buffering_defaults_make_the_synchronous_run_block_often() -> None:
    """The default thresholds make sync block on >= 10% of the turns (108 tokens a turn, estimated)."""
    tokens = sum(bench_counter().count_message(m) for turn in range(200) for m in turn_messages(turn))
    assert tokens / buffering.MESSAGE_TOKENS >= 0.10 * 200


def test_prompt_cache_quick() -> None:
    payload = prompt_cache.run(_ns(prompt_cache, demo_turns=12, thresholds=["demo"]))
    run = payload["runs"][0]
    assert run["turns"] == 12 and run["calls"] >= 12
    assert 0 < run["cached_share_within_ttl"] <= run["cached_share"] < 1
    assert run["cached_tokens_total"] < run["input_tokens_total"]
    assert "cacheable %" in prompt_cache.report(payload)


def test_step_cost_and_prompt_tokens_quick() -> None:
    args = _ns(step_cost, sizes=[300, 600], steps=3, stores=["memory"])
    payload, stats = step_cost.run(args)
    for name in ("om-memory", "summarization-70k", "summarization-800k", "full-history"):
        for size in ("300", "600"):
            assert payload["strategies"][name][size]["memory_ms"]["n"] == 3
    assert payload["strategies"]["full-history"]["600"]["state_messages"] == 600 + 2 * (3 + 1)  # + warm-up step
    assert "om-memory: p50 at 600 / p50 at 300 (flat = 1)" in payload["ratios"]
    for size in ("300", "600"):  # OM's rarer steps: cold first steps and commits, timed apart
        om_case = payload["strategies"]["om-memory"][size]
        assert om_case["cold_ms"]["n"] == COLD_SAMPLES + 1 and om_case["cold_ms"]["p50"] > 0
        assert om_case["commit_ms"]["n"] >= 1 and om_case["commit_ms"]["p50"] > 0
    assert "om-memory cold step: p50 at 600 / p50 at 300 (flat = 1)" in payload["ratios"]
    comparisons = payload["target"]["comparisons"]
    assert {(c["om"], c["summarization"]) for c in comparisons} == {
        ("om-memory", "summarization-70k"), ("om-memory", "summarization-800k")}
    for c in comparisons:  # the first run and one repeat: the verdict says whether they straddle 0.1
        assert len(c["runs"]) == 2 and c["ratio"] == pytest.approx(sum(c["runs"]) / 2)
        assert c["spread"]["min"] <= c["ratio"] <= c["spread"]["max"]
        expected = ("met" if max(c["runs"]) <= 0.1 else "MISSED" if min(c["runs"]) > 0.1 else "within spread")
        assert c["verdict"] == expected and c["met"] == (expected == "met")
    text = step_cost.report(payload)
    assert "ratio median of 2 runs" in text
    assert "verdict:" in text and text.count("om-memory vs summarization-") == 2
    assert "om-memory: cold first step" in text and "om-memory: commit step" in text
    prompts = prompt_tokens.run(_ns(prompt_tokens, sizes=[300, 600], steps=3), stats)
    om, full = prompts["strategies"]["om"]["600"], prompts["strategies"]["full-history"]["600"]
    assert 0 < om["prefix_share_mean"] <= 1 and full["prompt_tokens_max"] >= full["prompt_tokens_mean"] > 0
    assert "prefix % mean" in prompt_tokens.report(prompts)
    ratios = prompts["ratios"]
    for name in ("summarization-70k", "summarization-800k", "full-history"):
        for size in ("300", "600"):
            expected = om["prompt_tokens_mean"] / full["prompt_tokens_mean"] if name == "full-history" else None
            value = ratios[f"om / {name} tokens mean at {size}"]
            assert value > 0 and ratios[f"om / {name} tokens max at {size}"] > 0
            if expected is not None and size == "600":
                assert value == pytest.approx(expected)
    assert set(ratios["prefix share mean at 600"]) == {"om", "summarization-70k", "summarization-800k",
                                                       "full-history"}
    assert "OM prompt tokens / other strategy's" in prompt_tokens.report(prompts)


def test_step_cost_reports_persistence_when_both_stores_run() -> None:
    args = _ns(step_cost, sizes=[300], steps=2, stores=["sqlite", "memory"])
    payload, _ = step_cost.run(args)
    persistence = payload["persistence"]["300"]
    assert persistence["sqlite_minus_memory_ms"] == pytest.approx(persistence["sqlite_ms"] - persistence["memory_ms"])
    assert len(payload["target"]["comparisons"]) == 4
    assert "no-op persistence" in step_cost.report(payload)


def test_token_counting_quick() -> None:
    payload = token_counting.run(_ns(token_counting, messages=300))
    assert set(payload["counters"]) == {"estimator", "tiktoken", "approximate"}
    assert payload["counters"]["tiktoken"]["error_vs_o200k"] == 0
    for data in payload["counters"].values():
        assert data["messages_per_s"] > 0 and data["cached_messages_per_s"] > 0


def test_storage_quick_sqlite_only() -> None:
    payload = storage.run(_ns(storage, messages=1200, threads=3, batch=200, pages=6, no_pg=True))
    sqlite = payload["backends"]["sqlite"]
    assert sqlite["messages_stored"] == 1200
    assert sqlite["non_empty_pages"] == 6
    assert sqlite["recall_page_ms"]["n"] == 6
    assert payload["backends"]["postgres"] == {"skipped": "--no-pg"}


def test_branches_quick_times_steps_and_forks() -> None:
    payload = branches.run(_ns(branches, sizes=[60, 120], steps=3, forks=1, stores=["memory"]))
    per = payload["stores"]["memory"]
    for size in ("60", "120"):
        assert per[size]["plain_step_ms"]["n"] == 3 and per[size]["checkpoint_step_ms"]["n"] == 3
        assert per[size]["fork_step_ms"]["n"] == 1
        assert per[size]["rows_copied_per_fork"] > 0 and per[size]["snapshot_bytes"] > 0
    assert "memory: checkpoint step / plain step at 120 (p50)" in payload["ratios"]


def test_wirings_quick_times_every_wiring_at_each_size() -> None:
    payload = wirings.run(_ns(wirings, wiring_sizes=[40, 120], wiring_steps=2))
    assert {c["wiring"] for c in payload["cases"]} == set(wirings.WIRINGS)
    for case in payload["cases"]:
        assert case["step_ms"]["n"] == 2 and case["cold_ms"] > 0
        # every step stored its new messages on the one thread (a user message, and a reply)
        assert case["stored_after"] >= case["history"] + 3
    assert len(payload["target"]["verdicts"]) == len(wirings.WIRINGS)
    assert "agent: p50 at 120 / p50 at 40 (flat = 1)" in payload["ratios"]


def test_import_time_quick_compares_with_langgraph() -> None:
    payload = import_time.run(_ns(import_time, import_runs=1))
    assert set(payload["medians"]) == set(import_time.STATEMENTS)
    assert all(m["cpu_ms"] > 0 for m in payload["medians"].values())
    assert payload["target"]["ratio"] is not None


def test_search_quick_sqlite_only() -> None:
    payload = search.run(_ns(search, messages=600, threads=2, batch=100, queries=5, dim=16, baseline_queries=2,
                             no_pg=True))
    sqlite = payload["backends"]["sqlite"]
    assert sqlite["messages_stored"] == 600 and sqlite["vectors_loaded"] > 0  # read back after the restart
    assert sqlite["keyword_queries_with_hits"] > 0
    for key in ("keyword_store_ms", "keyword_tool_ms", "semantic_index_ms", "hybrid_tool_ms"):
        assert sqlite[key]["n"] == 5
    assert payload["baseline_in_memory"]["semantic_ms"]["n"] == 2
    assert payload["backends"]["postgres"] == {"skipped": "--no-pg"}
    assert set(payload["target"]) == {"sqlite keyword p95 < 50 ms", "sqlite semantic p95 < 100 ms"}
    assert "Search:" in search.report(payload)


def test_vector_restart_quick_sqlite_only() -> None:
    payload = vector_restart.run(_ns(vector_restart, vector_messages=1200, vector_threads=3, vector_dim=16,
                                     vector_queries=4, no_pg=True))
    sqlite = payload["backends"]["sqlite"]
    assert sqlite["same_top_hits"], "the segments and the table scan find the same hits"
    for load in ("table_scan", "segmented"):
        assert sqlite[load]["loaded"] == 1200 and sqlite[load]["queries_ms"]["n"] == 4
    assert sqlite["segments"]["rows"] == 1024 and sqlite["segments"]["count"] == 2  # 176 rows left in the table
    assert payload["backends"]["postgres"] == {"skipped": "--no-pg"}
    assert "after a restart" in vector_restart.report(payload)


def test_search_languages_quick_sqlite_only() -> None:
    payload = search_languages.run(_ns(search_languages, messages=400, threads=2, batch=100, queries=5, no_pg=True))
    sqlite = payload["backends"]["sqlite"]
    for lang in ("en", "ja"):
        assert sqlite[lang]["ms"]["n"] == 5 and sqlite[lang]["queries_with_hits"] > 0
    assert sqlite["ja"]["index_mb"]["message_search_cjk"] > 0 and sqlite["en"]["index_mb"]["message_search_cjk"] == 0
    assert sqlite["ja"]["backfill_s"] > 0 and sqlite["ja"]["trigram_alternative"]["index_mb"] > 0
    assert set(payload["target"]) == {"sqlite Japanese p95 within 2x of English"}
    assert "English vs Japanese" in search_languages.report(payload)


def test_suite_writes_json_and_png(tmp_path: Path) -> None:
    suite.main(["--quick", "--only", "token_counting,storage", "--out", str(tmp_path), "--messages", "400",
                "--no-pg", "--pages", "4", "--threads", "2"])
    assert json.loads((tmp_path / "token_counting.json").read_text())["benchmark"] == "token_counting"
    assert "backends" in json.loads((tmp_path / "storage.json").read_text())
    assert json.loads((tmp_path / "summary.json").read_text())["quick"] is True
    assert (tmp_path / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_own_work_times_each_checkout_side_by_side(tmp_path: Path) -> None:
    # this checkout stands in for the baseline too: both run in their own subprocess, alternately
    root = str(Path(own_work.__file__).resolve().parent.parent)
    payload = own_work.run(_ns(own_work, sizes=[60], steps=2, rounds=1, store="memory", baseline=root))
    for name in ("before", "after"):
        figures = payload["rows"][name]["60"]
        assert figures["source"] == root
        for case in own_work.CASES:
            assert figures[f"{case}_own_ms"] > 0
        assert figures["agent_cpu_per_turn_ms"] > 0 and figures["floor_ms"] > 0
    assert "aprocess_own_ms at 60: after / before" in payload["ratios"]
    assert "OM's own work per step" in own_work.report(payload)


def test_suite_rejects_unknown_section() -> None:
    with pytest.raises(SystemExit):
        suite.main(["--only", "nope"])


def test_agent_step_runs_every_strategy_through_create_agent() -> None:
    args = _ns(agent_step, agent_sizes=[300, 600], agent_steps=2, savers=["sqlite", "memory"])
    payload = agent_step.run(args)
    cases = {(c["strategy"], c["saver"], c["history"]): c for c in payload["cases"]}
    assert len(cases) == len(agent_step.STRATEGIES) * 2 * 2 + 2, "every strategy, and the floor once per saver"
    for saver in ("sqlite", "memory"):
        floor = cases[(agent_step.FLOOR, saver, agent_step.FLOOR_HISTORY)]
        assert floor["state_messages"] == agent_step.FLOOR_HISTORY + 2 * 3
    for case in cases.values():
        assert case["step_ms"]["n"] == 2 and case["step_ms"]["mean"] > 0
        assert (case["disk_bytes_per_step"] is None) == (case["saver"] == "memory")
    # remove_observed: OM's checkpointed state is its unobserved tail, the others keep (nearly) everything
    for saver in ("sqlite", "memory"):
        assert cases[("om", saver, 600)]["state_messages"] < cases[("om-keep-state", saver, 600)]["state_messages"]
        assert cases[("om-turn-state", saver, 600)]["state_messages"] == 2, "keep_in_state='turn': one turn"
        assert cases[("full-history", saver, 600)]["state_messages"] == 600 + 2 * 3
    assert {(c["om"], c["summarization"]) for c in payload["target"]["comparisons"]} == {
        (om, summ) for om in agent_step.OM_VARIANTS for summ in ("summarization-70k", "summarization-800k")}
    for c in payload["target"]["comparisons"]:
        floor_ms = cases[(agent_step.FLOOR, c["saver"], agent_step.FLOOR_HISTORY)]["step_ms"]["p50"]
        assert c["floor_ms"] == floor_ms
        assert c["lowest_possible_ratio"] == pytest.approx(floor_ms / c["summarization_ms"])
    assert "minus model time" in agent_step.report(payload)


def test_cache_misses_reports_cold_steps_and_thread_counts() -> None:
    payload = cache_misses.run(_ns(cache_misses, cold_sizes=[30, 60], threads=[4, 5, 8], cache_limit=4, rounds=1,
                                   warm_steps=1))
    assert set(payload["cold"]) == {"30", "60"} and set(payload["threads"]) == {"4", "5", "8"}
    assert payload["cold"]["60"]["handed"] > 60 and payload["cold"]["60"]["peak_bytes_per_message"] > 0
    assert payload["threads"]["4"]["cached_share"] == 1.0  # fewer threads than the cache: every step finds its own
    assert any("5 threads within" in key for key in payload["target"])
    assert "cold minus warm" in cache_misses.report(payload)


def test_scale_section_runs_and_reports_every_figure(tmp_path: Path) -> None:
    from benchmarks import scale

    args = _ns(scale, sizes=[200, 400], steps=3, stores=["sqlite"], rounds=0)
    payload = scale.run(args)
    per_size = payload["stores"]["sqlite"]
    assert set(per_size) == {"200", "400"}
    for figures in per_size.values():
        assert figures["cold_ms"] > 0 and figures["rss_mib"] > 0 and figures["warm_p50_ms"] > 0
        assert figures["commit_steps"] >= 1 and figures["commit_p50_ms"] > 0
    assert "cold / commit" in scale.report(payload)


def test_load_reports_every_figure_and_a_clean_integrity_check(tmp_path: Path) -> None:
    from benchmarks import load

    payload = load.run(_ns(load, users=[3], stores=["sqlite"], turns=2, observer_latency=0.0))
    runs = payload["stores"]["sqlite"]
    om, bare = runs["3"], runs["3-bare"]
    for key in ("turns_per_s", "p50_ms", "p95_ms", "p99_ms", "max_ms", "lag_p99_ms", "lag_max_ms", "errors",
                "background_failures", "cpu_per_turn_ms", "om_cpu_per_turn_ms", "integrity"):
        assert key in om, key
    assert om["turns"] == bare["turns"] == 6 and om["errors"] == 0 and om["integrity"] == "ok"
    assert bare["integrity"] == "n/a"
    assert "integrity" in load.report(payload)
    soak = load.run(_ns(load, stores=["sqlite"], soak=0.03, soak_users=4, cache_limit=2, observer_latency=0.0))
    data = soak["stores"]["sqlite"]["soak"]
    assert data["turns"] > 0 and data["errors"] == 0 and data["integrity"] == "ok"
    assert data["rss_mb"] is not None and data["rss_mb"]["max"] > 0


def test_load_measures_a_baseline_checkout_side_by_side() -> None:
    from benchmarks import load

    # this checkout stands in for the baseline too: each runs in its own subprocess, alternately
    root = str(Path(load.__file__).resolve().parent.parent)
    # one round each (min_turns=0): this checks the side-by-side mechanics, not the statistics
    payload = load.run(_ns(load, users=[2], stores=["sqlite"], turns=2, observer_latency=0.0, baseline=root,
                           min_turns=0))
    assert payload["checkouts"] == {"before": root, "after": root}
    assert payload["sources"] == {"before": root, "after": root}
    for runs in (payload["before"]["sqlite"], payload["stores"]["sqlite"]):
        assert runs["2"]["turns"] == runs["2-bare"]["turns"] == 4 and runs["2"]["integrity"] == "ok"
        assert "om_cpu_per_turn_ms" in runs["2"]
    assert "sqlite 2 users: OM cpu/turn after / before" in payload["ratios"]
    assert isinstance(payload["target"]["sqlite 2 users: OM cpu/turn <= 0.5 x before"], bool)
    assert "before -> after" in load.report(payload)


def test_workers_runs_one_and_several_processes_on_one_thread() -> None:
    from benchmarks import workers

    payload = workers.run(_ns(workers, workers=2, modes=["concurrent"], turns=6, observer_delay=0.0,
                              reflector_delay=0.0, agent_delay=0.0, stores=["sqlite"]))
    one, two = payload["results"]["sqlite"]
    assert (one["workers"], two["workers"]) == (1, 2) and two["mode"] == "concurrent"
    assert one["steps"] == 6 and two["steps"] == 12 and one["stored_messages"] == two["stored_messages"] > 0
    assert len(two["cold_step_ms"]) == 2 and two["observer_calls"] >= 1
    assert "sqlite/deployment/concurrent/x2/step_p95" in payload["ratios"]
    assert one["thresholds"] == two["thresholds"] == "deployment"
    text = workers.report(payload)
    assert "Several workers on one thread" in text and "--thresholds tight" in text
    # each verdict names the setting it was measured with
    assert all("message_tokens 600, observation_tokens 1500" in key for key in payload["target"])


def test_prompt_meter_reusing_message_objects_gives_the_figures_of_a_fresh_count() -> None:
    """The meter skips re-serializing objects the previous prompt held; its figures must be the
    ones a meter that counts everything again gives (here: a fresh meter per prompt pair)."""
    history = conversation(60)
    history[3].content = "日本語の質問です 🙂 and English"  # before any measure: objects are not edited later
    prompts = [history[:40], history[:42], history[2:42], history[:44]]
    reused = PromptMeter(bench_counter())
    figures = [reused.measure(p) for p in prompts]
    for previous, prompt, got in zip([None, *prompts[:-1]], prompts, figures, strict=True):
        fresh = PromptMeter(bench_counter())
        if previous is not None:
            fresh.measure([m.model_copy() for m in previous])  # other objects: nothing to reuse
        assert fresh.measure([m.model_copy() for m in prompt]) == got


def test_the_default_suite_runs_load_short_and_full_runs_it_big() -> None:
    from benchmarks import OPT_IN, load

    assert "load" not in OPT_IN  # README quotes its figures: one run regenerates them
    default = _ns(load)
    default.load_quick = False
    load.resolve_sizes(default)
    assert (default.users, default.turns) == ([1, 10], 8)
    full = _ns(load, full=True, load_quick=False)
    load.resolve_sizes(full)
    assert (full.users, full.turns) == ([1, 10, 50, 200], 12)
    chosen = _ns(load, users=[3], turns=2)
    load.resolve_sizes(chosen)
    assert (chosen.users, chosen.turns) == ([3], 2)


def test_a_wiring_verdict_whose_rounds_straddle_the_target_says_so() -> None:
    def case(wiring: str, size: int, round_: int, p50: float) -> dict[str, Any]:
        return {"wiring": wiring, "history": size, "round": round_, "step_ms": summary([p50]), "cold_ms": 1.0}

    cases = [case("agent+saver", 152, r, 10.0) for r in range(3)]
    cases += [case("agent+saver", 10_000, r, p50) for r, p50 in enumerate([12.0, 14.0, 13.5])]  # 1.2, 1.4, 1.35
    cases += [case("agent", 152, r, 10.0) for r in range(3)] + [case("agent", 10_000, r, 11.0) for r in range(3)]
    payload = wirings.payload_from(cases, [152, 10_000], 1)
    verdicts = {v["wiring"]: v for v in payload["target"]["verdicts"]}
    assert verdicts["agent+saver"]["verdict"] == "within spread" and not verdicts["agent+saver"]["met"]
    assert verdicts["agent+saver"]["ratio"] == pytest.approx(1.35)
    assert verdicts["agent"]["verdict"] == "met" and len(payload["cases"]) == 4
    text = wirings.report(payload)
    assert "median of 3 rounds, min-max 1.20-1.40" in text and "within spread" in text


def test_search_embeds_each_distinct_text_once_with_the_vectors_of_a_fresh_embedding(tmp_path: Path) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from langchain_om.store.search import encode_vector
    from langchain_om.store.sqlite import SQLiteStore

    rows = storage._rows(40)  # repeats of fewer distinct messages would need 5,000; 40 distinct here
    rows += [row.model_copy(update={"id": f"again{i}"}) for i, row in enumerate(rows[:10])]
    embeddings = DeterministicFakeEmbedding(size=8)
    encoded: dict[str, bytes] = {}

    async def scenario() -> tuple[int, list[bytes], list[bytes]]:
        store = SQLiteStore(str(tmp_path / "s.db"))
        try:
            _, _, count = await search.fill(store, rows, 2, 7, embeddings, encoded=encoded)
            texts = list(encoded)
            return count, [encoded[t] for t in texts], [encode_vector(v) for v in embeddings.embed_documents(texts)]
        finally:
            await store.aclose()

    count, cached, fresh = asyncio.run(scenario())
    assert count == 50 and cached == fresh and len(encoded) <= 40


def test_cache_misses_states_each_rounds_thread_ratio() -> None:
    payload = cache_misses.run(_ns(cache_misses, cold_sizes=[], threads=[4, 5], cache_limit=4, rounds=2))
    assert len(payload["threads"]["5"]["round_p50_ms"]) == 2
    (key,) = [k for k in payload["target"] if "5 threads within" in k]
    assert "per round" in key and "over 2" in key
    assert payload["target"][key] in (True, False, "within spread: the rounds straddle the target")
    assert key in cache_misses.report(payload)
