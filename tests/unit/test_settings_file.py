"""Settings files (``--settings FILE``, ``Settings.from_file``, ``RagClient(settings_file=)``): the layout, every
error naming the file and the key, the round trip of the writer, and where the file sits in the precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag.cli import build_parser, main
from es_rag.cli.commands import COMMANDS
from es_rag.cli.options import bm25_preset, mmr_preset, settings_from_args
from es_rag.errors import ConfigError
from es_rag.settings import Settings
from es_rag.settings.file import dump_settings, read_settings_file

PROFILE = """
# a profile
context_k = 4

[index]
analyzer = "english"
bm25_k1 = 1
bm25_b = 0.4

[retrieve]
bm25_fields = ["title^3", "text"]
bm25_tie_breaker = 0.25

[fusion]
rank_constant = 40
channel_weights = { bm25 = 1.5, dense = 1 }

[rerank]
rerank_threshold = "off"
rerank_model = "none"
"""


def _write(tmp_path: Path, text: str, name: str = "es-rag.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_tables_and_top_level_keys_become_typed_settings(tmp_path: Path) -> None:
    values = read_settings_file(_write(tmp_path, PROFILE))
    assert values == {
        "context_k": 4,
        "analyzer": "english",
        "bm25_k1": 1.0,
        "bm25_b": 0.4,
        "bm25_fields": ("title^3", "text"),
        "bm25_tie_breaker": 0.25,
        "rank_constant": 40,
        "channel_weights": {"bm25": 1.5, "dense": 1.0},
        "rerank_threshold": None,
        "rerank_model": None,
    }
    s = Settings.from_file(tmp_path / "es-rag.toml")
    assert (s.index.analyzer.value, s.index.bm25_k1, s.retrieve.bm25_fields) == ("english", 1.0, ("title^3", "text"))
    assert (s.fusion.rank_constant, s.select.context_k) == (40, 4)
    assert s.fusion.channel_weights == {"bm25": 1.5, "dense": 1.0}
    assert s.rerank.model is None
    assert Settings.from_file(tmp_path / "es-rag.toml", rank_constant=7).fusion.rank_constant == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[fusion]\nrank_constnt = 40\n", "[fusion] unknown setting 'rank_constnt'; did you mean rank_constant?"),
        ("[fusoin]\nrank_constant = 40\n", "unknown table [fusoin]; valid tables: index, encoder, chunking"),
        ("[retrieve]\nbm25_k1 = 0.9\n", "[retrieve] bm25_k1: belongs to the [index] table, not [retrieve]"),
        ("[fusion]\nrank_constant = 'sixty'\n", "[fusion] rank_constant: expected an integer, got 'sixty' (string)"),
        ("[fusion]\nrank_constant = 60.5\n", "rank_constant: expected an integer, got 60.5 (float)"),
        ("[index]\nbm25_b = true\n", "[index] bm25_b: expected a number, got True (boolean)"),
        ("[index]\nbm25_b = 1.5\n", "[index] bm25_b: must be within [0, 1], got 1.5"),
        ("[index]\nanalyzer = 'klingon'\n", "[index] analyzer: invalid value 'klingon'"),
        ("[index]\nanalyzer = 3\n", "analyzer: expected a string, one of auto, standard, english, cjk, kuromoji"),
        ("[retrieve]\nbm25_fields = [1, 2]\n", "bm25_fields: expected an array of strings"),
        ("[fusion]\nchannel_weights = { sparse = 2 }\n", "channel_weights: unknown channel 'sparse'"),
        ("[gate]\ngate_margin = 'never'\n", 'gate_margin: expected a number or "off"'),
        ("context_k = 3\n[select]\ncontext_k = 4\n", "context_k: given twice (top level and here)"),
        ("latest_version_boost = 0.1\n", "setting 'latest_version_boost' was removed"),
        ("rank_constant = \n", "not valid TOML"),
    ],
)
def test_every_error_names_the_file_the_key_and_what_is_valid(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        read_settings_file(path)
    assert str(err.value).startswith(str(path)) or str(err.value).startswith(f"settings file {path}")
    assert message in str(err.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        Settings.from_file(tmp_path / "nope.toml")


def test_a_rule_between_groups_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[select]\ncontext_k = 50\n")  # > rerank_k 40: valid per group, not together
    with pytest.raises(ConfigError, match=rf"^{path}: candidate counts must satisfy context_k <= rerank_k"):
        Settings.from_file(path)
    args = build_parser().parse_args(["search", "q", "--tenant", "t", "--settings", str(path)])
    with pytest.raises(ConfigError, match=rf"with the settings file {path}"):
        settings_from_args(args)
    args = build_parser().parse_args(["search", "q", "--tenant", "t", "--settings", str(path), "--rerank-k", "50"])
    assert settings_from_args(args).select.context_k == 50  # the command line completes the file


def test_the_writer_round_trips_every_kind_of_value(tmp_path: Path) -> None:
    s = Settings(
        analyzer="english", bm25_fields=("title^2", "text"), channel_weights={"bm25": 0.75}, rerank_model=None,
        gate_margin=0.2, rerank_timeout=None, source_tiers={"handbook*": 0.2, "a b": -0.1}, language="ja",
        metadata_fields=("team:keyword",), fusion_method="linear",
    )  # fmt: skip
    values = {k: v for k, v in s.flat().items() if v != Settings().flat()[k]}
    text = dump_settings(values, header=["tuned on x", "second line"])
    assert text.startswith("# tuned on x\n# second line\n\n[index]\n")
    path = _write(tmp_path, text)
    assert Settings.from_file(path) == s
    assert text.index("[index]") < text.index("[retrieve]") < text.index("[fusion]") < text.index("[rerank]")


def test_precedence_defaults_file_presets_flags(tmp_path: Path) -> None:
    path = _write(tmp_path, "[index]\nbm25_k1 = 1.7\nanalyzer = 'standard'\n[select]\nmmr_lambda = 0.9\n")
    parser = build_parser()

    def eval_settings(*argv: str) -> Settings:
        args = parser.parse_args(["eval", "--dataset", "d", "--settings", str(path), *argv])
        return settings_from_args(args, presets=[bm25_preset(args), mmr_preset(args)])

    # eval's default preset is the product defaults (`settings`): the file's values win, the rest are defaults ...
    s = eval_settings()
    assert (s.index.bm25_k1, s.index.analyzer.value, s.index.bm25_b, s.retrieve.bm25_fields) == (
        1.7, "standard", 0.75, ("title", "heading_path", "text"),
    )  # fmt: skip
    # ... and a named BEIR preset overrides the file
    s = eval_settings("--bm25-protocol", "beir-multifield")
    assert (s.index.bm25_k1, s.index.bm25_b, s.retrieve.bm25_fields) == (0.9, 0.4, ("title", "text"))
    assert s.select.mmr_lambda == 0.9
    # ... a preset named on the command line overrides the file, and an explicit flag overrides both
    s = eval_settings("--bm25-protocol", "beir-es", "--mmr-preset", "exploratory")
    assert (s.index.bm25_k1, s.index.analyzer.value, s.select.mmr_lambda) == (1.2, "english", 0.5)
    s = eval_settings("--bm25-protocol", "beir-es", "--bm25-k1", "0.3", "--mmr-lambda", "0.6")
    assert (s.index.bm25_k1, s.select.mmr_lambda) == (0.3, 0.6)
    # a command's own default (setup: analyzer=auto) sits under the file too
    args = parser.parse_args(["setup", "--settings", str(path)])
    assert settings_from_args(args, resolve=False).index.analyzer.value == "standard"
    args = parser.parse_args(["setup"])
    assert settings_from_args(args, resolve=False).index.analyzer.value == "auto"


def test_a_file_may_set_settings_the_command_does_not_read(tmp_path: Path) -> None:
    path = _write(tmp_path, "[chunking]\nchunk_max_tokens = 128\nchunk_overlap = 16\n[fusion]\nrank_constant = 30\n")
    args = build_parser().parse_args(["search", "q", "--tenant", "t", "--settings", str(path)])
    s = settings_from_args(args)
    assert (s.chunking.max_tokens, s.fusion.rank_constant) == (128, 30)


def test_every_command_takes_settings_and_a_bad_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in COMMANDS:
        assert main([name, "--help"]) == 0
        assert "--settings FILE" in capsys.readouterr().out, name
    path = _write(tmp_path, "[fusion]\nrank_constant = 0\n")
    assert main(["search", "q", "--tenant", "t", "--index-dir", str(tmp_path / "idx"), "--settings", str(path)]) == 2
    assert f"{path}: [fusion] rank_constant: must be a positive integer, got 0" in capsys.readouterr().err


def test_rag_client_reads_a_settings_file(tmp_path: Path) -> None:
    from es_rag.client import RagClient

    path = _write(tmp_path, "[fusion]\nrank_constant = 33\n[select]\ncontext_k = 3\n")
    with RagClient.open(None, settings_file=path, context_k=2) as rag:
        assert (rag.settings.fusion.rank_constant, rag.settings.select.context_k) == (33, 2)
    with pytest.raises(ConfigError, match="settings and settings_file: give one"):
        RagClient.open(None, Settings(), settings_file=path)
