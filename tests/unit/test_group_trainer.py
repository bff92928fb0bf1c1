"""The listwise trainer: time budget arithmetic, learning, checkpoints that resume to the same weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.group_trainer import CHECKPOINT, GroupTrainConfig, fit_steps, train_groups
from es_rag.evaluation.rerank_groups import Group

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _groups() -> list[Group]:
    # the answer has the question's word and "yes"; the negatives other words and "no"
    return [
        Group(f"q{i}", w, (f"{w} yes", *[f"{o} no" for o in WORDS if o != w][:3]), ("same-article@0",) * 3)
        for i, w in enumerate(WORDS)
    ]


def test_the_step_count_fits_the_budget_after_the_measurements() -> None:
    config = GroupTrainConfig(base_model="x", time_budget_s=1000, eval_every=100, max_steps=10_000)
    # 990 s left, one final measurement of 10 s: 980 s at 2 s a step + 10 s per 100 steps = 2.1 s a step
    assert fit_steps(config, 2.0, 10.0, 10.0, 10) == 10 + int(980 / 2.1)
    assert fit_steps(config, 0.001, 10.0, 0.0, 10) == 10_000  # max_steps caps it
    assert fit_steps(config, 5.0, 2000.0, 10.0, 10) == 11  # over budget: at least the step under way ends
    no_budget = GroupTrainConfig(base_model="x", time_budget_s=None, max_steps=7)
    assert fit_steps(no_budget, 1.0, 0.0, 0.0, 0) == 7


@pytest.mark.parametrize(
    ("field", "value"), [("groups_per_step", 0), ("max_steps", 0), ("time_budget_s", 0.0), ("learning_rate", 0.0)]
)
def test_invalid_settings_are_config_errors(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field.replace("_s", "") if field == "time_budget_s" else field):
        GroupTrainConfig(base_model="x", **{field: value})


def _config(base: Path, **more: Any) -> GroupTrainConfig:
    values: dict[str, Any] = {
        "base_model": str(base),
        "groups_per_step": 2,
        "max_steps": 12,
        "time_budget_s": None,
        "learning_rate": 5e-3,
        "warmup_steps": 2,
        "max_length": 16,
        "eval_every": 4,
        "checkpoint_every_s": 3600,
        "device": "cpu",
    }
    values.update(more)
    return GroupTrainConfig(**values)


def _answer_first(score: Any) -> dict[str, Any]:
    wins = 0
    for g in _groups():
        s = score([(g.query, p) for p in g.passages])
        wins += int(s[0] > max(s[1:]))
    return {"answer_first": wins}


def test_training_puts_the_answer_first_and_the_model_loads(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    config = _config(tiny_cross_encoder, max_steps=40, eval_every=20)
    state = train_groups(_groups(), config, tmp_path / "m", evaluate=_answer_first, progress=False)
    assert state.step == 40 and len(state.losses or []) == 40
    curve = state.curve or []
    assert [p["step"] for p in curve] == [0, 20, 40]
    assert curve[-1]["answer_first"] >= 7 > curve[0]["answer_first"]  # 8 groups; chance is 2 of them
    assert sum(state.losses[-10:]) < sum(state.losses[:10])  # type: ignore[index]
    CrossEncoder(str(tmp_path / "m"))  # what --rerank-model loads


def test_an_interrupted_run_resumes_to_the_same_weights(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    config = _config(tiny_cross_encoder)
    train_groups(_groups(), config, tmp_path / "whole", progress=False)
    calls = {"n": 0}

    def stop_at_step_8(score: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 3:  # before training, at step 4, at step 8
            raise KeyboardInterrupt
        return {}

    with pytest.raises(KeyboardInterrupt):
        train_groups(_groups(), config, tmp_path / "cut", evaluate=stop_at_step_8, progress=False)
    assert (tmp_path / "cut" / CHECKPOINT).is_file() and not (tmp_path / "cut" / "model.safetensors").exists()
    state = train_groups(_groups(), config, tmp_path / "cut", resume=True, progress=False)
    assert state.resumed_from == 8 and state.step == 12
    whole = load_file(str(tmp_path / "whole" / "model.safetensors"))
    cut = load_file(str(tmp_path / "cut" / "model.safetensors"))
    assert whole.keys() == cut.keys()
    for name in whole:
        assert torch.equal(whole[name], cut[name]), name


def test_a_checkpoint_of_other_data_is_refused(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    config = _config(tiny_cross_encoder, max_steps=2)
    train_groups(_groups(), config, tmp_path / "m", progress=False)
    with pytest.raises(InputError, match="other data or settings"):
        train_groups(_groups()[:4], config, tmp_path / "m", resume=True, progress=False)
    with pytest.raises(InputError, match="no training group"):
        train_groups([], config, tmp_path / "m", progress=False)


def test_a_time_budget_fits_the_steps_and_stops(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    config = _config(tiny_cross_encoder, max_steps=100_000, time_budget_s=3.0, probe_steps=3, eval_every=0)
    lines: list[str] = []
    state = train_groups(_groups(), config, tmp_path / "m", log=lines.append, progress=False)
    assert 3 < state.step < 100_000 and state.total_steps == state.step
    assert any("steps fit the 3s budget" in line for line in lines)
