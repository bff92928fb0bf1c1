"""A listwise cross-encoder trainer with a time budget, resumable checkpoints and a progress bar with ETA.

Each step takes ``groups_per_step`` groups (:class:`~es_rag.evaluation.rerank_groups.Group`: a question, its answer
passage, its hard negatives), scores every (question, passage) pair with one logit and minimises the softmax
cross-entropy of the answer against its group (localized contrastive estimation, Gao et al. 2021).

* **Time budget.** With ``time_budget_s`` the number of steps is fitted to it after the first ``probe_steps`` steps
  (measured seconds per step, minus the time the measurements will take), so the learning rate's linear decay ends
  when the budget does; ``max_steps`` caps it either way.
* **Checkpoints.** Every ``checkpoint_every_s`` seconds, at the end and on Ctrl-C, the weights, optimizer, scheduler,
  step, fitted step count, data order, random states, losses and learning curve are written to
  ``<out>/checkpoint.pt`` (a temporary file renamed over the old one: a kill leaves the old or the new one).
  ``resume=True`` continues from it; a checkpoint of another configuration is refused.
* **Measurement.** ``evaluate`` is called before the first step, every ``eval_every`` steps and at the end with a
  scorer of (question, passage) pairs; its result is one point of the learning curve.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError, InputError, ModelLoadError
from es_rag.evaluation.rerank_groups import Group, Scorer

CHECKPOINT = "checkpoint.pt"


@dataclass
class GroupTrainConfig:
    """Hyper-parameters of :func:`train_groups`.

    Args:
        base_model: Checkpoint (dir or hub name) to start from; its head is replaced by one logit.
        groups_per_step: Groups (questions) per optimizer step.
        max_steps: Most optimizer steps.
        time_budget_s: Seconds of training (measurements included); None: ``max_steps`` alone decides.
        learning_rate: AdamW peak learning rate (linear warm-up, then linear decay to 0 at the last step).
        warmup_steps: Warm-up steps.
        max_length: Token limit of one (question, passage) pair.
        seed: Data order and head initialisation seed.
        device: Torch device (``auto``: cuda, else mps, else cpu).
        eval_every: Steps between measurements (0: before and after training only).
        checkpoint_every_s: Seconds between checkpoints.
        freeze_embeddings: Keep the word embeddings fixed (half of a MiniLM's weights; faster steps, and the
            vocabulary of words the training data lacks keeps its pre-trained meaning).
        probe_steps: Steps timed before the step count is fitted to the time budget.
    """

    base_model: str
    groups_per_step: int = 4
    max_steps: int = 100_000
    time_budget_s: float | None = 3600.0
    learning_rate: float = 1e-4
    warmup_steps: int = 50
    max_length: int = 256
    seed: int = 13
    device: str = "auto"
    eval_every: int = 200
    checkpoint_every_s: float = 300.0
    freeze_embeddings: bool = True
    probe_steps: int = 10

    def __post_init__(self) -> None:
        if self.groups_per_step < 1:
            raise ConfigError(f"groups_per_step: must be >= 1, got {self.groups_per_step}")
        if self.max_steps < 1:
            raise ConfigError(f"max_steps: must be >= 1, got {self.max_steps}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ConfigError(f"time_budget: must be > 0, got {self.time_budget_s}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate: must be > 0, got {self.learning_rate}")

    def fingerprint(self, groups: Sequence[Group]) -> str:
        """What a checkpoint must match to be resumed: the configuration (time budget, checkpoint and measurement
        intervals left out) and the training data."""
        keep = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("time_budget_s", "checkpoint_every_s", "eval_every", "device", "max_steps")
        }
        digest = hashlib.sha256(json.dumps(keep, sort_keys=True).encode())
        for g in groups:
            digest.update(g.to_json().encode())
        return digest.hexdigest()[:16]


@dataclass
class TrainState:
    """What a run did (and what a checkpoint holds besides tensors)."""

    step: int = 0
    total_steps: int | None = None
    seconds: float = 0.0
    losses: list[float] | None = None
    curve: list[dict[str, Any]] | None = None
    resumed_from: int | None = None


def _schedule(config: GroupTrainConfig, total: Callable[[], int]) -> Callable[[int], float]:
    def factor(step: int) -> float:
        warm = max(1, min(config.warmup_steps, total() // 10 or 1))
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total() - step) / max(1, total() - warm))

    return factor


def load_base(base_model: str, *, max_length: int, device: str, seed: int) -> Any:
    """The base ``CrossEncoder`` both trainers start from, one logit head, seeded.

    Args:
        base_model: Hub name or folder.
        max_length: Token limit of a pair.
        device: ``auto``, ``cpu``, ``cuda``, ... (:func:`~es_rag.encoders.device.resolve_device`).
        seed: Seeds torch before the head is made.

    Raises:
        ModelLoadError: The base model cannot be loaded.
    """
    import torch
    from sentence_transformers import CrossEncoder

    from es_rag.encoders.device import resolve_device
    from es_rag.encoders.embedder import quiet_model_loading, resolve_model_path

    quiet_model_loading()
    torch.manual_seed(seed)
    path, _ = resolve_model_path(base_model)
    try:
        ce = CrossEncoder(path, num_labels=1, max_length=max_length, device=resolve_device(device).device)
    except Exception as exc:
        raise ModelLoadError(f"cannot load base model {base_model!r}: {type(exc).__name__}: {exc}") from exc
    return ce


def pair_logits(
    model: Any, tok: Any, pairs: Sequence[tuple[str, str]], *, max_length: int, batch: int, truncation: Any
) -> list[float]:
    """The raw logit of each (question, passage) pair of a model being trained, scored ``batch`` pairs at a time
    without gradients (the measurement callbacks of both trainers).

    Args:
        model: A transformers sequence-classification model with one logit.
        tok: Its tokenizer.
        pairs: ``(question, passage)`` pairs.
        max_length: Token limit of one pair.
        batch: Pairs per forward pass.
        truncation: The tokenizer's truncation strategy (``True``, ``"only_second"``).
    """
    import torch

    scores: list[float] = []
    with torch.inference_mode():
        for i in range(0, len(pairs), batch):
            chunk = pairs[i : i + batch]
            feats = tok(
                [q for q, _ in chunk],
                [p for _, p in chunk],
                padding=True,
                truncation=truncation,
                max_length=max_length,
                return_tensors="pt",
            ).to(model.device)
            scores.extend(float(x) for x in model(**feats).logits.view(-1).tolist())
    return scores


def fit_steps(config: GroupTrainConfig, seconds_per_step: float, elapsed: float, eval_seconds: float, done: int) -> int:
    """Steps that fit the time budget: those done plus what the remaining seconds hold at the measured pace, after
    the measurements still to come (one every ``eval_every`` steps and one at the end, ``eval_seconds`` each).

    Args:
        config: The budget, ``max_steps`` and ``eval_every``.
        seconds_per_step: Measured pace.
        elapsed: Seconds spent so far.
        eval_seconds: Seconds one measurement takes.
        done: Steps done.
    """
    if config.time_budget_s is None:
        return config.max_steps
    left = max(0.0, config.time_budget_s - elapsed)
    per_step = seconds_per_step + (eval_seconds / config.eval_every if config.eval_every else 0.0)
    more = int(max(0.0, left - eval_seconds) / max(per_step, 1e-9))
    return max(done + 1, min(config.max_steps, done + more))


def train_groups(
    groups: Sequence[Group],
    config: GroupTrainConfig,
    output_dir: str | Path,
    *,
    evaluate: Callable[[Scorer], dict[str, Any]] | None = None,
    resume: bool = False,
    log: Callable[[str], None] | None = None,
    progress: bool = True,
) -> TrainState:
    """Train on ``groups`` and save the model to ``output_dir`` (a directory ``CrossEncoder`` loads).

    Args:
        groups: Training groups (answer first).
        config: Hyper-parameters.
        output_dir: Model directory; the checkpoint is written there too.
        evaluate: Measurement callback (see the module doc).
        resume: Continue from ``<output_dir>/checkpoint.pt`` when present.
        log: Receives one line per measurement and checkpoint.
        progress: Show a progress bar with ETA.

    Raises:
        InputError: No group, or a checkpoint of another configuration or data.
        ModelLoadError: The base model cannot be loaded.
    """
    import torch

    from es_rag.progress import tqdm

    if not groups:
        raise InputError("train-reranker", "groups", "no training group (no question with a hard negative)")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / CHECKPOINT
    fingerprint = config.fingerprint(groups)
    ce = load_base(config.base_model, max_length=config.max_length, device=config.device, seed=config.seed)
    model, tok = ce.model, ce.tokenizer
    if config.freeze_embeddings:
        embeddings = model.get_input_embeddings()
        if embeddings is not None:
            embeddings.weight.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.01)
    state = TrainState(losses=[], curve=[])
    total_box = [config.max_steps]  # fitted to the time budget after the first steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config, lambda: total_box[0]))
    order = list(range(len(groups)))
    random.Random(config.seed).shuffle(order)
    if resume and checkpoint.is_file():
        saved = torch.load(checkpoint, map_location=model.device, weights_only=False)
        if saved.get("fingerprint") != fingerprint:
            raise InputError(
                str(checkpoint),
                "fingerprint",
                "the checkpoint was written with other data or settings; train into a new --out, or start over "
                "with --no-resume",
            )
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        state = TrainState(**saved["state"])
        state.resumed_from = state.step
        total_box[0] = state.total_steps or total_box[0]
        random.setstate(saved["python_rng"])
        torch.set_rng_state(saved["torch_rng"])
        if log:
            log(f"resumed from {checkpoint} at step {state.step} ({state.seconds:.0f}s done)")
    assert state.losses is not None and state.curve is not None
    model.train()

    def score_pairs(pairs: Sequence[tuple[str, str]]) -> list[float]:
        return pair_logits(model, tok, pairs, max_length=config.max_length, batch=64, truncation=True)

    eval_seconds = [0.0]

    def measure() -> None:
        if evaluate is None:
            return
        t = time.perf_counter()
        model.eval()
        point = evaluate(score_pairs)
        model.train()
        eval_seconds[0] = time.perf_counter() - t
        recent = state.losses[-50:] if state.losses else []
        entry = {
            "step": state.step,
            "seconds": round(state.seconds, 1),
            "train_loss": round(sum(recent) / len(recent), 4) if recent else None,
            **point,
        }
        state.curve.append(entry)  # type: ignore[union-attr]
        if log:
            log("measured: " + ", ".join(f"{k} {v}" for k, v in entry.items()))

    def save_checkpoint() -> None:
        state.total_steps = total_box[0]
        tmp = checkpoint.with_suffix(".pt.tmp")
        torch.save(
            {
                "fingerprint": fingerprint,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "state": asdict(state),
                "python_rng": random.getstate(),
                "torch_rng": torch.get_rng_state(),
            },
            tmp,
        )
        tmp.replace(checkpoint)

    started = time.perf_counter() - state.seconds
    if state.step == 0 and not state.curve:
        measure()
    last_checkpoint = time.perf_counter()
    fitted = state.total_steps is not None
    import sys

    bar = tqdm(
        total=total_box[0],
        initial=state.step,
        desc="training",
        unit="step",
        disable=not progress,
        mininterval=0.1 if sys.stderr.isatty() else 30.0,
    )
    probe_start: float | None = None
    since = (state.step, 0.0)
    stepping = [0.0]  # seconds spent in steps (not measuring) since this process started training

    def refit() -> None:
        """Fit the step count again to the pace since the last fit (a loaded machine slows down mid-run, and the
        first steps are slower than the rest)."""
        nonlocal since
        if config.time_budget_s is None or not fitted or state.step <= since[0]:
            return
        pace = (stepping[0] - since[1]) / (state.step - since[0])
        elapsed = time.perf_counter() - started
        total_box[0] = fit_steps(config, pace, elapsed, eval_seconds[0], state.step)
        bar.total = total_box[0]
        bar.refresh()
        since = (state.step, stepping[0])

    try:
        while state.step < total_box[0]:
            step_start = time.perf_counter()
            if not fitted and config.time_budget_s is not None and probe_start is None:
                probe_start = time.perf_counter()
                probe_from = state.step
            first = state.step * config.groups_per_step
            chosen = [groups[order[(first + i) % len(order)]] for i in range(config.groups_per_step)]
            feats = tok(
                [g.query for g in chosen for _ in g.passages],
                [p for g in chosen for p in g.passages],
                padding=True,
                truncation=True,
                max_length=config.max_length,
                return_tensors="pt",
            ).to(model.device)
            logits = model(**feats).logits.view(-1)
            parts, start = [], 0
            for g in chosen:
                parts.append(-torch.log_softmax(logits[start : start + len(g.passages)], dim=0)[0])
                start += len(g.passages)
            loss: Any = torch.stack(parts).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            state.step += 1
            state.losses.append(round(float(loss.item()), 5))
            state.seconds = time.perf_counter() - started
            bar.update(1)
            bar.set_postfix(loss=f"{sum(state.losses[-20:]) / len(state.losses[-20:]):.4f}")
            if not fitted and probe_start is not None and state.step - probe_from >= config.probe_steps:
                pace = (time.perf_counter() - probe_start) / (state.step - probe_from)
                total_box[0] = fit_steps(config, pace, state.seconds, eval_seconds[0], state.step)
                fitted = True
                since = (state.step, stepping[0] + time.perf_counter() - step_start)
                bar.total = total_box[0]
                bar.refresh()
                if log:
                    log(f"{pace:.2f}s a step: {total_box[0]} steps fit the {config.time_budget_s:.0f}s budget")
            stepping[0] += time.perf_counter() - step_start
            if config.eval_every and state.step % config.eval_every == 0 and state.step < total_box[0]:
                measure()
                refit()
            if time.perf_counter() - last_checkpoint >= config.checkpoint_every_s:
                refit()
                save_checkpoint()
                last_checkpoint = time.perf_counter()
    except KeyboardInterrupt:
        save_checkpoint()
        bar.close()
        if log:
            log(f"interrupted at step {state.step}: checkpoint {checkpoint}; --resume continues")
        raise
    bar.close()
    measure()
    state.seconds = time.perf_counter() - started
    save_checkpoint()
    model.eval()
    ce.save(str(out))
    return state


def epochs_of(state: TrainState, config: GroupTrainConfig, groups: int) -> float:
    """Passes over the groups a run made."""
    return round(state.step * config.groups_per_step / max(1, groups), 3) if groups else math.nan
