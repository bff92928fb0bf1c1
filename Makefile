# es_rag developer commands. Everything installs from this repository's own files.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is pinned: the CPU wheel 2.13.0; an unpinned torch resolves to a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: demo test test-fast install install-dev spec-deps lucene-deps lint typecheck mutation clean reranker-en

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH) -e '.[offline-model]'

install-dev: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH) -e '.[dev]'

spec-deps:
	npm ci --prefix spec --no-audit --no-fund --loglevel=error

## Real Lucene 10.5 for tests/lucene: the jar from the pyserini sdist on PyPI (once, sha256-checked, cached under
## ~/.cache/es_rag/lucene) and the oracle compiled with a Java 21+ JDK (scripts/lucene-oracle.sh). Without a JDK or
## the network those tests skip, saying why; with ES_RAG_REQUIRE_LUCENE=1 (CI) this target fails instead.
lucene-deps:
	bash scripts/lucene-oracle.sh >/dev/null || [ "$${ES_RAG_REQUIRE_LUCENE:-0}" != 1 ]

## Quickstart 1: install and run the demo on the embedded default (no cluster needed).
demo: install
	$(BIN)/es-rag demo

## Quickstart 2: install and run the whole test suite (unit, spec/tsc, golden, e2e; live tests skip without ES_URL).
test: install-dev spec-deps lucene-deps
	$(BIN)/ruff check es_rag tests scripts benchmarks examples
	$(BIN)/ruff format --check es_rag tests scripts benchmarks examples
	$(BIN)/mypy es_rag
	$(BIN)/lint-imports
	bash scripts/run-tests.sh -n auto --dist loadfile

## The edit loop: the unit, contract and double tests on every core, stopping at the first failure (no install,
## no lint; `make test` is what CI runs).
test-fast:
	bash scripts/run-tests.sh -n auto --dist loadfile -x tests/unit tests/contract tests/double tests/comparison

lint: install-dev
	$(BIN)/ruff check es_rag tests scripts benchmarks examples
	$(BIN)/ruff format --check es_rag tests scripts benchmarks examples
	$(BIN)/lint-imports

typecheck: install-dev
	$(BIN)/mypy es_rag

## Mutation testing ([tool.mutmut] in pyproject.toml; not in CI: slow on 2 cores). Report: docs/mutation.md.
mutation: install-dev
	rm -rf mutants
	$(BIN)/mutmut run
	$(BIN)/mutmut results

## The shipped English cross-encoder (es_rag/models/reranker-en, docs/reranker.md): all-MiniLM-L6-v2 trained listwise
## on SQuADShifts Amazon and Reddit questions (../shared/eval/rerank-train-en), one hour on 2 CPU cores (a GPU when
## there is one), exported as int8 ONNX. Resumes from .es_rag/reranker-en-train when interrupted. The shipped fusion
## (es_rag_fusion.json: how the model's order meets the fused one) is kept across the rebuild; it was chosen by the
## answer-coverage sweep in docs/reranker.md, which a retrained model should be measured with again.
SHARED ?= ../shared
reranker-en: install-dev
	mkdir -p .es_rag && cp es_rag/models/reranker-en/es_rag_fusion.json .es_rag/reranker-en-fusion.json
	$(BIN)/es-rag train-reranker \
	  --squad $(SHARED)/eval/rerank-train-en/amazon_reviews_v1.0.json \
	  --squad $(SHARED)/eval/rerank-train-en/reddit_v1.0.json \
	  --eval-golden $(SHARED)/eval/rag-en-train/golden.jsonl $(SHARED)/eval/rag-en-train/docs \
	  --time-budget 62 --train-questions 6000 --eval-questions 50 --eval-every 1000 \
	  --out .es_rag/reranker-en-train --ship es_rag/models/reranker-en \
	  --licence "weights: Apache-2.0 (all-MiniLM-L6-v2 base); trained on SQuADShifts (CC BY 4.0: Miller, Krauth, Recht, Schmidt, ICML 2020)"
	cp .es_rag/reranker-en-fusion.json es_rag/models/reranker-en/es_rag_fusion.json

clean:
	rm -rf $(VENV) spec/node_modules spec/generated .es_rag build dist
