"""The per-user disk cache of checked catalog entries (fsdpsim.util.disk_cache): an entry is
reused only for the same data bytes and code, a change builds again, a damaged entry or an
unwritable folder falls back to building, and the built-in catalogs read through it equal
those read without it."""

from __future__ import annotations

import os

import pytest

from fsdpsim.util import disk_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("FSDPSIM_CACHE_DIR", str(folder))
    return folder


def _counting(tmp_path, text="a"):
    data = tmp_path / "data.toml"
    data.write_text(text)
    calls = []

    def build():
        calls.append(1)
        return {"text": data.read_text(), "n": len(calls)}

    return data, calls, build


def test_second_read_comes_from_the_cache(tmp_path, cache):
    data, calls, build = _counting(tmp_path)
    first = disk_cache.cached("t", [data], [], build)
    second = disk_cache.cached("t", [data], [], build)
    assert first == second == {"text": "a", "n": 1}
    assert len(calls) == 1
    assert len(list(cache.glob("t-*.pickle"))) == 1


def test_changed_data_builds_again_and_replaces_the_entry(tmp_path, cache):
    data, calls, build = _counting(tmp_path)
    disk_cache.cached("t", [data], [], build)
    data.write_text("b")
    assert disk_cache.cached("t", [data], [], build) == {"text": "b", "n": 2}
    assert len(list(cache.glob("t-*.pickle"))) == 1


def test_changed_code_builds_again(tmp_path, cache):
    data, calls, build = _counting(tmp_path)
    code = tmp_path / "code"
    code.mkdir()
    (code / "m.py").write_text("x = 1\n")
    disk_cache.cached("t", [data], [code], build)
    (code / "m.py").write_text("x = 22\n")
    disk_cache.cached("t", [data], [code], build)
    assert len(calls) == 2


def test_damaged_entry_is_rebuilt(tmp_path, cache):
    data, calls, build = _counting(tmp_path)
    disk_cache.cached("t", [data], [], build)
    for entry in cache.glob("t-*.pickle"):
        entry.write_bytes(b"not a pickle")
    assert disk_cache.cached("t", [data], [], build)["n"] == 2


def test_off_and_unwritable_folders_build_every_time(tmp_path, monkeypatch):
    data, calls, build = _counting(tmp_path)
    monkeypatch.setenv("FSDPSIM_CACHE_DIR", "")
    disk_cache.cached("t", [data], [], build)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FSDPSIM_CACHE_DIR", str(blocker / "sub"))  # under a file: not creatable
    disk_cache.cached("t", [data], [], build)
    disk_cache.cached("t", [data], [], build)
    assert len(calls) == 3


def test_a_failing_build_caches_nothing(tmp_path, cache):
    data = tmp_path / "data.toml"
    data.write_text("a")

    def build():
        raise ValueError("bad file")

    with pytest.raises(ValueError):
        disk_cache.cached("t", [data], [], build)
    assert not cache.exists() or not list(cache.iterdir())


def test_builtin_catalogs_read_through_the_cache_equal_a_fresh_read(tmp_path, monkeypatch):
    import functools

    from fsdpsim.hardware import catalog as hardware
    from fsdpsim.model import catalog as models

    # private memoised readers for this test: the process's own (which other modules' presets
    # were taken from) stay as they are
    monkeypatch.setattr(hardware, "_load_cached",
                        functools.lru_cache(maxsize=8)(hardware._load_cached.__wrapped__))
    monkeypatch.setattr(models, "builtin", functools.cache(models.builtin.__wrapped__))

    def read():
        hardware._load_cached.cache_clear()
        models.builtin.cache_clear()
        hw = hardware.load_catalog(use_env=False)
        return ({k: [repr(hw.get(k, i)) for i in hw.ids(k)] for k in hardware.KINDS},
                {name: repr(spec) for name, spec in models.builtin().specs.items()})

    monkeypatch.setenv("FSDPSIM_CACHE_DIR", "")
    fresh = read()
    monkeypatch.setenv("FSDPSIM_CACHE_DIR", str(tmp_path / "cache"))
    stored, cached = read(), read()
    assert fresh == stored == cached
    assert len(os.listdir(tmp_path / "cache")) == 2
