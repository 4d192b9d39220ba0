"""The model catalog (model_catalog/*.toml, fsdpsim.model.catalog): every entry builds, the
presets keep their published counts, user folders add models, and a malformed entry is one
line naming the file, the entry and the key."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run

from fsdpsim.model import catalog
from fsdpsim.model.presets import ALIASES, PRESETS, get_model, list_models
from fsdpsim.model.spec import ModelSpec
from fsdpsim.util.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "model_catalog").glob("*.toml"))


def _raw(kind: str) -> list[tuple[Path, dict]]:
    return [(path, entry) for path in FILES
            for entry in tomllib.loads(path.read_text()).get(kind, [])]


def test_every_entry_builds_with_a_source():
    models = _raw("model")
    assert [e["id"] for _, e in models] == list_models() == list(PRESETS)
    assert len(models) == 51
    families = {e["id"] for _, e in _raw("family")}
    for path, entry in models:
        spec = get_model(entry["id"])
        assert isinstance(spec, ModelSpec) and spec.name == entry["id"]
        assert len(entry["source"]) > 10, (path.name, entry["id"])
        assert entry.get("family") in families, entry["id"]
        for alias in entry.get("aliases", []):
            assert get_model(alias.upper()) is spec
    assert set(ALIASES.values()) <= set(PRESETS) and len(ALIASES) == 10
    assert "arXiv:2307.09288" in catalog.builtin().source("llama-2-7b")
    assert {e.get("family") for _, e in models} == families  # no family left unused


def test_every_spec_field_is_a_key():
    """The keys are read from the dataclass: a new ModelSpec field is accepted at once."""
    names = {f.name for f in dataclasses.fields(ModelSpec)} - {"name"}
    assert names <= set(catalog.accepted_keys("model")) == set(catalog.accepted_keys("model"))
    assert catalog.spec_keys()["attention_pattern"].choices == ("full", "sliding", "chunked")
    assert catalog.spec_keys()["n_layers"].required
    assert not catalog.spec_keys()["n_kv_heads"].required


def test_entry_values_are_the_spec_values():
    """What an entry writes is what the spec holds; what it leaves out comes from its family
    (GPT's MLP of 4 d included)."""
    for _, entry in _raw("model"):
        spec = PRESETS[entry["id"]]
        for key, value in entry.items():
            if key in catalog.spec_keys():
                assert getattr(spec, key) == (tuple(value) if isinstance(value, list) else value)
    gpt = PRESETS["gpt3-175b"]
    assert gpt.ffn_size == 4 * gpt.d_model == 49152


def _hand_count(L, d, heads, kv_heads, f, V, tied):
    """Llama block by hand: q, o of d x d, k, v of d x kv, SwiGLU 3 d f, two RMSNorms."""
    kv = d // heads * kv_heads
    block = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    return L * block + d + V * d * (1 if tied else 2)


@pytest.mark.parametrize("preset, expected", [
    # 12 L d^2 + 13 L d + (V + s) d + 2 d (Narayanan et al. 2021, Sec. 5.1), by hand
    ("gpt3-175b", 12 * 96 * 12288**2 + 13 * 96 * 12288 + (50257 + 2048) * 12288 + 2 * 12288),
    ("llama2-7b", 6_738_415_616),            # meta-llama/Llama-2-7b-hf
    ("llama3-70b", _hand_count(80, 8192, 64, 8, 28672, 128256, False)),
    ("deepseek-v3", 671_026_419_200),        # docs/models.md; 671B in the report
    ("gpt-oss-20b", 20_914_757_184),         # 20.91B in the model card
])
def test_counts_of_some_presets(preset, expected):
    assert get_model(preset).n_params == expected


MINE = """
[[model]]
id = "my-llama-3b"
family = "llama"
source = "meta-llama/Llama-3.2-3B config.json"
aliases = ["mine-3b"]
n_layers = 28
d_model = 3072
n_heads = 24
n_kv_heads = 8
ffn_size = 8192
vocab_size = 128256
max_seq_len = 8192
tied_embeddings = true
"""
NETWORK = """
[[network]]
id = "my-net"
name = "Mine"
source = "s"
retrieved = 2025-01-01
kind = "ethernet"
gbit_per_s_per_nic = 25
latency_us = 10.0
achievable_fraction = 0.8
fraction_source = "s"
"""


def test_a_user_folder_adds_a_model_beside_hardware(capsys, tmp_path):
    """A model TOML in a --catalog folder is found by model show/list and predict; the
    hardware catalog reads the same folder and skips the model tables."""
    (tmp_path / "mine.toml").write_text(MINE + NETWORK)
    hand = _hand_count(28, 3072, 24, 8, 8192, 128256, True)
    assert hand == 3_212_749_824  # Llama 3.2 3B: 3.21B
    rc, out, err = run(capsys, "--catalog", str(tmp_path), "model", "show", "Mine-3B",
                       "--format", "json")
    assert rc == 0 and err == "" and json.loads(out)["n_params"] == hand
    rc, out, _ = run(capsys, "--catalog", str(tmp_path), "model", "list", "--format", "csv")
    assert rc == 0 and "my-llama-3b," in out
    rc, out, _ = run(capsys, "--catalog", str(tmp_path), "catalog", "show", "my-net")
    assert rc == 0 and "my-net" in out
    rc, out, err = run(capsys, "--catalog", str(tmp_path), "predict", "--model", "my-llama-3b",
                       "--num-gpus", "8", "--format", "json")
    assert rc == 0, err
    # the folder lasts one command: a later call in the same process does not read it
    with pytest.raises(ConfigError, match="unknown model 'my-llama-3b'"):
        get_model("my-llama-3b")
    # without the folder the model is unknown again, and the built-in list is unchanged
    line = assert_one_line_error(*run(capsys, "model", "show", "my-llama-3b"))
    assert "unknown model 'my-llama-3b'" in line
    rc, out, _ = run(capsys, "model", "list", "--format", "csv")
    assert "my-llama-3b" not in out and len(out.splitlines()) == 52
    assert "my-llama-3b" not in PRESETS


def test_env_folder_adds_a_model(monkeypatch, tmp_path):
    (tmp_path / "mine.toml").write_text(MINE)
    monkeypatch.setenv("FSDPSIM_CATALOG", str(tmp_path))
    assert get_model("my-llama-3b").n_params == 3_212_749_824
    assert get_model("llama3-8b") is PRESETS["llama3-8b"]


BAD = [
    ("n_layers = 28", "n_layer = 28", ["'n_layer'", "did you mean: n_layers", "accepted keys"]),
    ("n_layers = 28", 'n_layers = "28"', ["'n_layers'", "wrong type", "integer"]),
    ("n_layers = 28", "n_layers = 28.0", ["'n_layers'", "wrong type"]),
    ("n_layers = 28", "n_layers = true", ["'n_layers'", "wrong type"]),
    ("tied_embeddings = true", "tied_embeddings = 1", ["'tied_embeddings'", "true/false"]),
    ("tied_embeddings = true", 'ffn_kind = "relu"', ["'ffn_kind'", "gelu, swiglu"]),
    ("tied_embeddings = true", 'attention_pattern = ["full", "local"]',
     ["'attention_pattern'", "full, sliding, chunked"]),
    ("tied_embeddings = true", "dense_layers = [0, true]", ["'dense_layers'", "integer"]),
    ('family = "llama"', 'family = "lama"', ["'lama'", "did you mean: llama"]),
    ('family = "llama"\n', "", ["missing required key 'ffn_kind'"]),
    ('source = "meta-llama/Llama-3.2-3B config.json"\n', "", ["missing required key 'source'"]),
    ('source = "meta-llama/Llama-3.2-3B config.json"', 'source = " "',
     ["missing required key 'source'"]),
    ("n_heads = 24", "n_heads = 25", ["n_heads", "divide"]),
    ('id = "my-llama-3b"', 'id = "My-Llama"', ["needs an 'id'", "'My-Llama'"]),
    ('id = "my-llama-3b"', 'id = "llama3-8b"',
     ["'llama3-8b' is already a model", "llama.toml: [[model]] 'llama3-8b'"]),
    ('aliases = ["mine-3b"]', 'aliases = ["llama-2-7b"]', ["alias 'llama-2-7b'"]),
    ("[[model]]", "[[modle]]", ["[[modle]]", "did you mean: model"]),
]


@pytest.mark.parametrize("old, new, named", BAD, ids=[b[1] or f"no {b[0].split()[0]}"
                                                      for b in BAD])
def test_a_malformed_entry_is_one_line_naming_file_entry_and_key(capsys, tmp_path, old, new,
                                                                 named):
    assert old in MINE
    path = tmp_path / "mine.toml"
    path.write_text(MINE.replace(old, new, 1))
    line = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "model", "show",
                                      "my-llama-3b"))
    assert str(path) in line, line
    if "[[" in new or "id =" in new:
        pass  # no entry to name: the file and the table or id are named
    else:
        assert "[[model]] 'my-llama-3b'" in line, line
    for text in named:
        assert text in line, (text, line)


def test_an_id_twice_in_one_folder(capsys, tmp_path):
    (tmp_path / "a.toml").write_text(MINE)
    (tmp_path / "b.toml").write_text(MINE.replace('aliases = ["mine-3b"]', ""))
    line = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "model", "list"))
    assert str(tmp_path / "b.toml") in line and str(tmp_path / "a.toml") in line


def test_the_built_in_folder_is_strict(tmp_path):
    """The shipped folder holds only [[family]] and [[model]]; a user folder may hold
    hardware tables too."""
    path = tmp_path / "x.toml"
    path.write_text(NETWORK)
    assert catalog._entries_of(path, strict=False) == []
    with pytest.raises(ConfigError, match=r"x\.toml: unknown table \[\[network\]\]"):
        catalog._entries_of(path, strict=True)
