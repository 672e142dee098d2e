"""Thresholds derived from a ratio round to the nearest token (issue 20, item 3).

Truncating the float product lost a token whenever it landed a hair under a whole number
(30,000 x (1 - 0.8) = 5,999.999...) or anywhere below the next one (1.3 x 33,333 = 43,332.9).
Each row: the options, the threshold read, and the rounded value (truncation gave one less
on every row named "was ...")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from langchain_om.engine.planner import retention_floor
from langchain_om.foundation.config import OMConfig, ratio_tokens

Reader = Callable[[OMConfig], int]


def obs_block(config: OMConfig) -> int:
    return config.observation.block_after_tokens()


def obs_interval(config: OMConfig) -> int:
    return config.observation.buffer_interval_tokens()


def obs_keep(config: OMConfig) -> int:
    return config.observation.tokens_to_keep_after_activation()


def obs_floor(config: OMConfig) -> int:
    return retention_floor(config)


def ref_block(config: OMConfig) -> int:
    return config.reflection.block_after_tokens()


def ref_buffer_start(config: OMConfig) -> int:
    return config.reflection.buffer_start_tokens()


def hard_ceiling(config: OMConfig) -> int:
    return config.hard_ceiling_tokens()


CASES: list[tuple[str, dict[str, Any], Reader, int]] = [
    ("the issue's block_after: 1.3 x 33,333 = 43,332.9 (was 43,332)",
     {"observation": {"message_tokens": 33_333, "block_after": 1.3}}, obs_block, 43_333),
    ("the issue's default retention: 30,000 x (1 - 0.8) (was 5,999)", {}, obs_keep, 6_000),
    ("retention 10,000 x (1 - 0.8) (was 1,999)",
     {"observation": {"message_tokens": 10_000, "buffer_tokens": 2000}}, obs_keep, 2_000),
    ("block_after 1.15 x 7,000 = 8,049.999... (was 8,049)",
     {"observation": {"message_tokens": 7_000, "block_after": 1.15}}, obs_block, 8_050),
    ("buffer interval 0.35 x 2,900 = 1,014.999... (was 1,014)",
     {"observation": {"message_tokens": 2_900, "buffer_tokens": 0.35}}, obs_interval, 1_015),
    ("activation retention floor (1 - 0.9) x 2,900 = 289.999... (was 289)",
     {"observation": {"message_tokens": 2_900, "buffer_tokens": 500, "buffer_activation": 0.9}},
     obs_floor, 290),
    ("reflection block_after 1.4 x 2,900 = 4,059.999... (was 4,059)",
     {"reflection": {"observation_tokens": 2_900, "block_after": 1.4}}, ref_block, 4_060),
    ("reflection buffer start 0.7 x 2,900 = 2,029.999... (was 2,029)",
     {"reflection": {"observation_tokens": 2_900, "buffer_activation": 0.7}}, ref_buffer_start, 2_030),
    ("reflection buffer start 0.5 x 33,333 = 16,666.5 (a half rounds up; was 16,666)",
     {"reflection": {"observation_tokens": 33_333}}, ref_buffer_start, 16_667),
    ("hard ceiling: 2 x the rounded block_after (was 86,664)",
     {"observation": {"message_tokens": 33_333, "block_after": 1.3}}, hard_ceiling, 86_666),
    # products that were right already stay as they were
    ("default block_after 1.2 x 30,000", {}, obs_block, 36_000),
    ("default buffer interval 0.2 x 30,000", {}, obs_interval, 6_000),
    ("default reflection buffer start 0.5 x 40,000", {}, ref_buffer_start, 20_000),
    ("default reflection block_after 1.2 x 40,000", {}, ref_block, 48_000),
    ("block_after 1.3 x 33,331 = 43,330.3 rounds down",
     {"observation": {"message_tokens": 33_331, "block_after": 1.3}}, obs_block, 43_330),
]


@pytest.mark.parametrize(("options", "read", "rounded"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_ratio_derived_threshold_rounds_to_the_nearest_token(options: dict[str, Any], read: Reader,
                                                               rounded: int) -> None:
    assert read(OMConfig.build(**options)) == rounded


@pytest.mark.parametrize(("base", "ratio", "expected"), [
    (30_000, 1 - 0.8, 6_000),
    (33_333, 1.3, 43_333),
    (3, 0.5, 2),  # half up, not to even
    (5, 0.5, 3),
    (10, 0.04, 0),  # 0.4 of a token
    (10, 0.06, 1),
    (0, 0.9, 0),
])
def test_ratio_tokens(base: int, ratio: float, expected: int) -> None:
    assert ratio_tokens(base, ratio) == expected


def test_absolute_token_values_are_used_as_given() -> None:
    config = OMConfig.build(observation={"message_tokens": 30_000, "block_after": 45_000, "buffer_tokens": 5_000,
                                         "buffer_activation": 4_000},
                            reflection={"observation_tokens": 40_000, "block_after": 50_000})
    assert obs_block(config) == 45_000 and obs_interval(config) == 5_000 and obs_keep(config) == 4_000
    assert ref_block(config) == 50_000
    assert obs_floor(config) == 4_000
