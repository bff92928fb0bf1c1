"""``es-rag tune``: search the documented knobs (:data:`KNOBS`) on a dev or train split with optuna and write the
best settings as a settings file (:mod:`es_rag.settings.file`) that every command reads with ``--settings``.

How a trial is measured: the corpus is embedded once (through the embedding cache) and indexed on the embedded
backend once per index-time set-up (analyzer, BM25 k1/b); every query-time knob (``multi_match`` fields and
boosts, tie_breaker, RRF rank constant, candidate count, channel weights, MMR lambda) is applied to a view of that
index (:meth:`~es_rag.embedded.backend.EmbeddedBackend.with_bm25_query`), so a trial costs the queries only.
Each trial runs :func:`~es_rag.evaluation.run.evaluate` -- the same pipeline and metrics as ``es-rag eval`` --
with ``candidate_k`` as the RRF window (the product's own window, not eval's ``--depth``), and scores one stage's
metric. Trial 0 is the base settings (defaults, preset, file and flags), measured the same way.

The test split is never read: :func:`check_split` refuses it. A dataset without ``qrels/dev.tsv`` (SciFact)
gets a dev split carved from train: a seeded share of the train queries (:func:`split_queries`).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError, EsRagError
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.index import EvalIndex, build_index
from es_rag.evaluation.run import evaluate
from es_rag.settings import Settings

DEV_FRACTION = 0.3
"""Share of the train queries that form the dev split of a dataset without ``qrels/dev.tsv``."""
SEED = 13
"""Seed of the dev split and of the sampler: the same command gives the same trials."""
STAGES = ("bm25", "dense", "hybrid", "rerank", "final", "selection")
"""Stages a tuning run can score; ``final`` = ``rerank`` when a reranker ran, else ``hybrid``."""
_RANKED_AFTER_FUSION = frozenset({"hybrid", "rerank", "final", "selection"})
_BM25_AND_AFTER = frozenset({"bm25"}) | _RANKED_AFTER_FUSION


@dataclass(frozen=True)
class Knob:
    """One tunable: its range for the TPE sampler, its values for the grid sampler, whether it needs a new index,
    and the stages whose metrics it can change (a knob is only searched when it can change the objective).

    Args:
        name: The knob (a flat setting name, or ``bm25_weight`` for ``channel_weights["bm25"]``).
        kind: ``float``, ``int`` or ``choice``.
        stages: Stages it can change.
        help: What it is, in one line.
        low: Lower bound (float, int).
        high: Upper bound (float, int).
        log: Sample on a log scale.
        choices: The values of a ``choice`` knob.
        grid: The values the grid sampler tries.
        index_time: Needs a new index (BM25 similarity is fixed when an Elasticsearch index is created).
    """

    name: str
    kind: str
    stages: frozenset[str]
    help: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()
    grid: tuple[Any, ...] = ()
    index_time: bool = False

    def current(self, settings: Settings) -> Any:
        """The knob's value in ``settings`` (as the sampler sees it).

        Args:
            settings: Settings.
        """
        if self.name == "bm25_weight":
            return float(settings.fusion.channel_weights.get("bm25", 1.0))
        value = settings.flat()[self.name]
        return ",".join(value) if isinstance(value, tuple) else value

    def suggest(self, trial: Any, base: Any) -> Any:
        """The trial's value (``base`` widens the range or the choices so trial 0 fits).

        Args:
            trial: An ``optuna.Trial``.
            base: The base settings' value.
        """
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, _with(self.choices, base))
        low, high = min(self.low, base), max(self.high, base)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(low), int(high), log=self.log)
        return trial.suggest_float(self.name, float(low), float(high), log=self.log)

    def changes(self, value: Any, settings: Settings) -> dict[str, Any]:
        """The flat settings the value stands for.

        Args:
            value: The trial's value.
            settings: The settings it applies to.
        """
        if self.name == "bm25_weight":
            return {"channel_weights": {**settings.fusion.channel_weights, "bm25": round(float(value), 4)}}
        if self.name == "candidate_k":  # kNN needs num_candidates >= k, as on the command line
            return {"candidate_k": value, "num_candidates": max(settings.retrieve.num_candidates, int(value))}
        if self.name == "bm25_fields":
            return {"bm25_fields": tuple(f.strip() for f in str(value).split(",") if f.strip())}
        if self.kind == "float":
            return {self.name: round(float(value), 4)}
        return {self.name: value}


def _with(values: Sequence[Any], extra: Any) -> list[Any]:
    return list(values) if extra in values else [extra, *values]


KNOBS: tuple[Knob, ...] = (
    Knob(
        "bm25_fields",
        "choice",
        _BM25_AND_AFTER,
        "multi_match fields and boosts",
        choices=("title^2,heading_path^1.5,text", "title,text", "title^0.5,text", "title^3,text", "text"),
        grid=("title^2,heading_path^1.5,text", "title,text", "text"),
    ),
    Knob(
        "bm25_tie_breaker",
        "float",
        _BM25_AND_AFTER,
        "best_fields tie_breaker (1 = sum of the fields)",
        low=0.0,
        high=1.0,
        grid=(0.0, 0.5, 1.0),
    ),
    Knob(
        "rank_constant",
        "int",
        _RANKED_AFTER_FUSION,
        "RRF rank constant",
        low=5,
        high=120,
        log=True,
        grid=(5, 20, 60),
    ),
    Knob(
        "candidate_k",
        "choice",
        _RANKED_AFTER_FUSION,
        "candidates per channel = RRF window",
        choices=(50, 100, 200),
        grid=(50, 200),
    ),
    Knob(
        "bm25_weight",
        "float",
        _RANKED_AFTER_FUSION,
        "channel_weights bm25 (dense and exact stay 1): the BM25 list's weight in fusion",
        low=0.25,
        high=4.0,
        log=True,
        grid=(0.5, 1.0, 2.0),
    ),
    Knob(
        "mmr_lambda",
        "float",
        frozenset({"selection"}),
        "MMR trade-off of the context selection",
        low=0.3,
        high=1.0,
        grid=(0.5, 0.7, 1.0),
    ),
    Knob("rerank_k", "choice", frozenset({"rerank"}), "fused candidates the cross-encoder scores", choices=(20, 40)),
    Knob("bm25_k1", "float", _BM25_AND_AFTER, "BM25 k1", low=0.4, high=2.0, grid=(0.9, 1.2, 1.5), index_time=True),
    Knob("bm25_b", "float", _BM25_AND_AFTER, "BM25 b", low=0.2, high=1.0, grid=(0.4, 0.75), index_time=True),
)
"""The knobs ``es-rag tune`` searches. Not tuned, on purpose: ``context_k`` (more context always raises context
recall: it is a cost set by the token budget, not a quality knob) and the chunk size (the evaluation unit is the
whole BEIR document; ``es-rag eval --ablate ladder`` measures chunk sizes)."""
KNOB_NAMES = tuple(k.name for k in KNOBS)


def select_knobs(stage: str, *, names: Sequence[str] | None = None, index_time: bool = False) -> list[Knob]:
    """The knobs a run searches: ``names`` when given, else every query-time knob that can change ``stage``'s
    metrics, plus the index-time ones with ``index_time``.

    Args:
        stage: The scored stage.
        names: Knob names chosen by the user.
        index_time: Add the index-time knobs (BM25 k1/b).

    Raises:
        ConfigError: An unknown knob or stage, a knob that cannot change the stage, or no knob at all.
    """
    if stage not in STAGES:
        raise ConfigError(f"stage: unknown {stage!r}; valid: {', '.join(STAGES)}")
    by_name = {k.name: k for k in KNOBS}
    if names:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ConfigError(f"knobs: unknown {', '.join(unknown)}; valid: {', '.join(KNOB_NAMES)}")
        chosen = [by_name[n] for n in dict.fromkeys(names)]
        idle = [k.name for k in chosen if stage not in k.stages]
        if idle:
            raise ConfigError(f"knobs: {', '.join(idle)} cannot change stage {stage}")
        return chosen
    chosen = [k for k in KNOBS if stage in k.stages and (index_time or not k.index_time)]
    if not chosen:
        raise ConfigError(f"stage {stage}: no knob of the catalogue changes it (knobs: {', '.join(KNOB_NAMES)})")
    return chosen


def check_split(split: str) -> None:
    """Refuse anything but ``dev`` and ``train``.

    Args:
        split: The split asked for.

    Raises:
        ConfigError: A test split (with the reason) or another unknown split.
    """
    if split.lower().startswith("test"):
        raise ConfigError(
            f"split {split}: tune never reads a test split -- settings chosen by their test score make that score "
            "optimistic and it no longer measures anything; tune on dev or train, then evaluate the profile once "
            "with `es-rag eval --split test --settings FILE`"
        )
    if split not in ("dev", "train"):
        raise ConfigError(f"split {split}: tune takes dev or train")


def split_queries(
    dataset: str | Path, split: str, *, fraction: float = DEV_FRACTION, seed: int = SEED
) -> tuple[str, list[str], str]:
    """``(qrels split to read, query ids, description)`` of a tuning split.

    ``dev`` is ``qrels/dev.tsv`` when the dataset has one, else a seeded ``fraction`` of the train queries
    (sorted ids, then ``random.Random(seed).sample``); ``train`` is every train query.

    Args:
        dataset: BEIR folder.
        split: ``dev`` or ``train``.
        fraction: Share of train queries forming a carved dev split.
        seed: Seed of the carving.
    """
    check_split(split)
    if split == "dev" and (Path(dataset) / "qrels" / "dev.tsv").is_file():
        _, queries, _ = load_beir(dataset, "dev")
        return "dev", list(queries), f"dev ({len(queries)} queries, qrels/dev.tsv)"
    _, queries, _ = load_beir(dataset, "train")
    ids = sorted(queries)
    if split == "train":
        return "train", ids, f"train ({len(ids)} queries)"
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"dev_fraction: must be within (0, 1), got {fraction}")
    n = max(1, round(len(ids) * fraction))
    chosen = sorted(random.Random(seed).sample(ids, n))
    return "train", chosen, f"dev = {fraction:g} of the train queries, seed {seed} ({n} of {len(ids)} queries)"


class _QueryMemo:
    """The embedder with each query's vector kept: every trial asks the same queries."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._memo: dict[str, Any] = {}

    def embed_query(self, text: str) -> Any:
        if text not in self._memo:
            self._memo[text] = self._inner.embed_query(text)
        return self._memo[text]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def stage_score(result: dict[str, Any], stage: str, metric: str) -> float:
    """The metric of one stage of an :func:`~es_rag.evaluation.run.evaluate` result.

    Args:
        result: The evaluation.
        stage: A :data:`STAGES` name.
        metric: A key of that stage's metrics (``ndcg@10``; ``context_recall`` for ``selection``).

    Raises:
        ConfigError: The stage did not run (``rerank`` without a reranker) or has no such metric.
    """
    stages = result["stages"]
    name = ("rerank" if stages.get("rerank") else "hybrid") if stage == "final" else stage
    values = stages.get(name)
    if not values:
        raise ConfigError(f"stage {stage}: did not run ({result['paths'].get('rerank', '')})")
    numbers = {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if stage == "selection":
        numbers = {"context_recall": values["context_recall"]}
    if metric not in numbers:
        raise ConfigError(f"metric {metric!r}: stage {stage} has {', '.join(numbers)}")
    return float(numbers[metric])


def tune(
    dataset: str | Path,
    *,
    settings: Settings,
    split: str = "dev",
    stage: str = "final",
    metric: str = "ndcg@10",
    knobs: Sequence[Knob] | None = None,
    trials: int = 30,
    timeout: float | None = None,
    sampler: str = "tpe",
    seed: int = SEED,
    dev_fraction: float = DEV_FRACTION,
    max_queries: int | None = None,
    cache_dir: str | Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Search ``knobs`` with optuna and return every trial, best first, and the best settings.

    Args:
        dataset: BEIR folder.
        settings: The base settings (trial 0). The reranker is off unless ``stage`` is ``rerank``.
        split: ``dev`` or ``train`` (:func:`split_queries`); a test split is refused.
        stage: The scored stage (:data:`STAGES`).
        metric: The scored metric of that stage (higher is better).
        knobs: What to search (default :func:`select_knobs` of the stage).
        trials: Trial budget, trial 0 included.
        timeout: Stop starting trials after this many seconds.
        sampler: ``tpe`` (seeded) or ``grid`` (every combination of the knobs' grid values, up to ``trials``).
        seed: Seed of the sampler and of the carved dev split.
        dev_fraction: Share of train queries forming a carved dev split.
        max_queries: Use only the first N queries of the split.
        cache_dir: Embedding cache root.
        progress: Called with each finished trial's row.

    Raises:
        ConfigError: A test split, an unknown stage, metric, knob or sampler, or ``trials`` < 1.
        EsRagError: optuna is not installed (the ``tune`` extra).
    """
    try:
        import optuna
    except ImportError:
        raise EsRagError("es-rag tune needs optuna: pip install 'es-rag[tune]'") from None
    if trials < 1:
        raise ConfigError(f"trials: must be >= 1, got {trials}")
    if sampler not in ("tpe", "grid"):
        raise ConfigError(f"sampler: unknown {sampler!r}; valid: tpe, grid")
    qrels_split, query_ids, described = split_queries(dataset, split, fraction=dev_fraction, seed=seed)
    if max_queries is not None:
        query_ids = query_ids[:max_queries]
    knobs = list(knobs) if knobs is not None else select_knobs(stage)
    if stage != "rerank":
        settings = settings.replace(rerank_model=None)
    base_values = {k.name: k.current(settings) for k in knobs}

    corpus, _, _ = load_beir(dataset, qrels_split)
    field_specs = dict.fromkeys(settings.retrieve.bm25_fields)
    for knob in knobs:
        if knob.name == "bm25_fields":
            for choice in knob.choices:
                field_specs.update(dict.fromkeys(choice.split(",")))
    all_fields = tuple(dict.fromkeys(spec.partition("^")[0] for spec in field_specs))
    indexes: dict[tuple[Any, ...], EvalIndex] = {}
    embedder: Any = None

    def index_for(s: Settings) -> EvalIndex:
        nonlocal embedder
        key = (s.index.analyzer, s.index.bm25_k1, s.index.bm25_b, s.index.similarity)
        if key not in indexes:
            built = build_index(
                corpus, s.replace(bm25_fields=all_fields), cache_dir=cache_dir, embedder=embedder, progress=False
            )
            embedder = embedder or _QueryMemo(built.embedder)
            indexes[key] = dataclasses.replace(built, embedder=embedder)
        return indexes[key]

    def measure(values: dict[str, Any]) -> tuple[Settings, dict[str, Any]]:
        s = settings
        for knob in knobs:
            s = s.replace(**knob.changes(values[knob.name], s))
        index = index_for(s)
        view = dataclasses.replace(
            index, backend=index.backend.with_bm25_query(s.retrieve.bm25_fields, s.retrieve.bm25_tie_breaker)
        )
        result = evaluate(
            dataset,
            split=qrels_split,
            settings=s,
            index=view,
            query_ids=query_ids,
            depth=s.retrieve.candidate_k,
            cache_dir=cache_dir,
        )
        return s, result

    rows: list[dict[str, Any]] = []
    best: dict[str, Any] = {}

    def objective(trial: Any) -> float:
        values = {k.name: k.suggest(trial, base_values[k.name]) for k in knobs}
        t0 = time.perf_counter()
        s, result = measure(values)
        score = stage_score(result, stage, metric)
        row = {
            "trial": trial.number,
            "label": "defaults" if trial.number == 0 else "",
            "score": round(score, 4),
            "params": values,
            "hybrid_ndcg@10": result["stages"]["hybrid"]["ndcg@10"],
            "bm25_ndcg@10": result["stages"]["bm25"]["ndcg@10"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        if not best or score > best["score"]:
            best.update(score=score, settings=s, trial=trial.number)
        if progress is not None:
            progress(row)
        return score

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler == "grid":
        # every combination of the grids, the base first, each once: enqueued in order, since optuna's GridSampler
        # does not count an enqueued base trial as a visited grid point and may then visit that point twice
        space = {k.name: _with(k.grid or k.choices, base_values[k.name]) for k in knobs}
        combos = [dict(zip(space, values, strict=True)) for values in itertools.product(*space.values())]
        combos.sort(key=lambda c: c != {k: base_values[k] for k in space})  # stable: the base combination first
        chosen: Any = optuna.samplers.RandomSampler(seed=seed)  # never consulted: every trial is enqueued
        budget = min(trials, len(combos))
        study = optuna.create_study(direction="maximize", sampler=chosen)
        for combo in combos[:budget]:
            study.enqueue_trial({**base_values, **combo})
    else:
        chosen = optuna.samplers.TPESampler(seed=seed)
        budget = trials
        study = optuna.create_study(direction="maximize", sampler=chosen)
        study.enqueue_trial(base_values)
    study.optimize(objective, n_trials=budget, timeout=timeout)
    if not rows:
        raise EsRagError("tune: no trial finished (raise --timeout)")
    defaults = rows[0]
    return {
        "dataset": str(dataset),
        "split": described,
        "queries": len(query_ids),
        "stage": stage,
        "metric": metric,
        "sampler": sampler,
        "seed": seed,
        "knobs": [k.name for k in knobs],
        "trials": sorted(rows, key=lambda r: (-r["score"], r["trial"])),
        "defaults_score": defaults["score"],
        "best_score": round(best["score"], 4),
        "best_trial": best["trial"],
        "best_settings": best["settings"],
        "base_settings": settings,
    }


def profile_values(result: dict[str, Any]) -> dict[str, Any]:
    """What the settings file of a tuning run holds: every setting of the best trial that differs from the
    defaults, plus every tuned setting (even at its default, so the profile does not move when a default does);
    the reranker the run switched off is left out.

    Args:
        result: A :func:`tune` result.
    """
    best: Settings = result["best_settings"]
    flat, defaults = best.flat(), Settings().flat()
    tuned = {"channel_weights" if k == "bm25_weight" else k for k in result["knobs"]}
    if "candidate_k" in tuned:
        tuned.add("num_candidates")
    out = {k: v for k, v in flat.items() if v != defaults[k] or k in tuned}
    if result["stage"] != "rerank":
        out.pop("rerank_model", None)
    return out


def profile_header(result: dict[str, Any], *, tool: str = "es-rag tune", when: datetime | None = None) -> list[str]:
    """The provenance comment of a tuning run's settings file.

    Args:
        result: A :func:`tune` result.
        tool: What wrote it (the command and its version).
        when: Timestamp (default: now, UTC).
    """
    stamp = (when or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    candidate_k = result["best_settings"].retrieve.candidate_k
    return [
        f"es-rag settings profile, written by {tool} on {stamp}",
        f"dataset: {result['dataset']}",
        f"split: {result['split']} -- the test split was not read",
        f"objective: {result['metric']} of stage {result['stage']}, {result['sampler']} sampler, seed "
        f"{result['seed']}, {len(result['trials'])} trials over {', '.join(result['knobs'])}",
        f"score: defaults {result['defaults_score']:.4f} -> best {result['best_score']:.4f} "
        f"(trial {result['best_trial']})",
        f"read it with: es-rag <command> --settings FILE; eval as tuned: es-rag eval --settings FILE "
        f"--depth {candidate_k} --split test",
    ]


def format_trials(result: dict[str, Any], *, limit: int | None = None) -> str:
    """The trials as a fixed-width table, best first (trial 0 = the defaults, labelled).

    Args:
        result: A :func:`tune` result.
        limit: Show at most this many rows (the defaults' row always shows).
    """
    rows = result["trials"]
    shown = rows if limit is None else rows[:limit]
    if limit is not None and not any(r["trial"] == 0 for r in shown):
        shown = [*shown, next(r for r in rows if r["trial"] == 0)]
    metric = f"{result['stage']} {result['metric']}"
    lines = [f"{'trial':>5}  {metric:>18}  {'bm25 ndcg@10':>12}  params"]
    for r in shown:
        params = " ".join(f"{k}={_shown(v)}" for k, v in r["params"].items())
        label = f"{r['trial']}{'*' if r['label'] else ''}"
        lines.append(f"{label:>5}  {r['score']:>18.4f}  {r['bm25_ndcg@10']:>12.4f}  {params}")
    return "\n".join(lines) + "\n(* trial 0 = the base settings: defaults, preset, --settings file and flags)"


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
