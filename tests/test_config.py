"""Settings: layers and their precedence, unknown keys, bad values, masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from reef_core.config import load_settings
from reef_core.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "reef.toml"
    path.write_text(text)
    return path


def test_defaults_file_env_flags_in_order_of_precedence(tmp_path: Path):
    config = _write(
        tmp_path,
        """
[reef]
port = 9001
host = "0.0.0.0"
[inference]
upstream-url = "http://file"
upstream_model = "file-model"
""",
    )
    env = {"REEF_UPSTREAM_URL": "http://env", "REEF_UPSTREAM_MODEL": "env-model"}
    s = load_settings(
        file=config, env=env, overrides=["--inference.upstream-model", "flag-model"], cwd=tmp_path
    )
    assert s.reef.port == 9001 and s.sources["reef.port"] == f"file:{config}"
    assert s.reef.host == "0.0.0.0"
    assert (
        s.inference.upstream_url == "http://env"
        and s.sources["inference.upstream_url"] == "env:REEF_UPSTREAM_URL"
    )
    assert s.inference.upstream_model == "flag-model"
    assert s.sources["inference.upstream_model"] == "flag:--inference.upstream-model"
    assert s.inference.upstream_api == "openai" and "inference.upstream_api" not in s.sources
    assert s.storage.state_dir == tmp_path / ".reef"


def test_recipe_profile_sits_between_defaults_and_file(tmp_path: Path):
    s = load_settings(env={}, overrides=["--recipe", "reefine"], cwd=tmp_path)
    assert s.recipe.name == "reefine" and s.reef.port == 8901
    assert s.storage.state_dir == tmp_path / ".reef" / "reefine"
    assert s.sources["reef.port"] == "profile:reefine"
    config = _write(tmp_path, "[reef]\nport = 7000\n")
    s = load_settings(file=config, env={}, overrides=["--recipe=reefine"], cwd=tmp_path)
    assert s.reef.port == 7000
    s = load_settings(file=config, env={}, overrides=["--recipe=reefine", "--reef.port=7100"], cwd=tmp_path)
    assert s.reef.port == 7100


def test_recipe_config_is_free_form_and_typed(tmp_path: Path):
    config = _write(tmp_path, "[recipe]\nname = 'grpo'\n[recipe.config]\ngroup_size = 4\nlr = 0.001\n")
    s = load_settings(
        file=config,
        env={},
        overrides=["--recipe.config.max-steps", "3", "--recipe.config.note", "hello world"],
        cwd=tmp_path,
    )
    assert s.recipe.config == {"group_size": 4, "lr": 0.001, "max_steps": 3, "note": "hello world"}
    assert s.inference.model_path == "builtin:tiny"  # the grpo profile


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["--reef.prot", "1"],
            "unknown setting 'reef.prot' (from flag:--reef.prot); did you mean reef.port?",
        ),
        (["--nosection.key", "1"], "unknown setting 'nosection.key'"),
        (["--reef.port", "eighty"], "reef.port must be an integer, got 'eighty' (from flag:--reef.port)"),
        (["--inference.upstream-api", "grpc"], "must be one of openai, anthropic"),
        (["--storage.fsync", "maybe"], "must be true or false"),
        (["--storage.node", "Node/1"], "storage.node must be a node name: 1-32 lowercase letters"),
        (["positional"], "unexpected argument 'positional'"),
        (["--port", "1"], "unknown option --port"),
    ],
)
def test_bad_flags_name_the_key(tmp_path: Path, overrides, message):
    with pytest.raises(ConfigError) as info:
        load_settings(env={}, overrides=overrides, cwd=tmp_path)
    assert message in str(info.value)


def test_bad_file_keys_and_syntax_name_the_problem(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"unknown setting 'storage.state-dri' \(from file:.*reef.toml\)"):
        load_settings(file=_write(tmp_path, "[storage]\nstate_dri = 'x'\n"), env={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"unknown section \[stroage\].*did you mean \[storage\]"):
        load_settings(file=_write(tmp_path, "[stroage]\nfsync = true\n"), env={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(file=_write(tmp_path, "[reef\nport = 1\n"), env={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(file=tmp_path / "missing.toml", env={}, cwd=tmp_path)


def test_secrets_are_masked_wherever_they_came_from(tmp_path: Path):
    config = _write(tmp_path, "[inference]\nupstream_api_key = 'sk-file-secret-123'\n")
    s = load_settings(file=config, env={"REEF_TOKEN": "tok-one, tok-two"}, cwd=tmp_path)
    assert s.reef.tokens == ("tok-one", "tok-two")
    assert s.inference.upstream_api_key == "sk-file-secret-123"
    rows = {key: (value, source) for key, value, source in s.describe()}
    assert rows["reef.tokens"] == ("********", "env:REEF_TOKEN")
    assert rows["inference.upstream-api-key"][0] == "********"
    assert "sk-file-secret-123" not in repr(s.describe()) and "tok-one" not in repr(s.describe())
    assert rows["storage.pack-every"] == ("2000", "default")


def test_the_node_name_is_off_by_default_and_checked_wherever_it_comes_from(tmp_path: Path):
    assert load_settings(env={}, cwd=tmp_path).storage.node == ""
    file = _write(tmp_path, "[storage]\nnode = 'eu-1'\n")
    assert load_settings(file=file, env={}, cwd=tmp_path).storage.node == "eu-1"
    assert load_settings(file=file, env={}, overrides=["--storage.node="], cwd=tmp_path).storage.node == ""
    for bad in ("EU", "-eu", "eu.1", "a" * 33, "../x"):
        with pytest.raises(ConfigError, match=r"storage\.node must be a node name.*\(from file:") as info:
            load_settings(file=_write(tmp_path, f"[storage]\nnode = {bad!r}\n"), env={}, cwd=tmp_path)
        assert info.value.field == "storage.node"
