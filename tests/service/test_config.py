from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from service import config as config_module
from service.config import Config, ConfigError, load
from tests.conftest import ROOT

EXAMPLE = ROOT / "config.example.toml"


def _leaf_paths(data: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        paths |= _leaf_paths(value, path + ".") if isinstance(value, dict) else {path}
    return paths


def test_example__documents_every_setting():
    documented = _leaf_paths(tomllib.loads(EXAMPLE.read_text()))
    every = _leaf_paths(config_module._converter.unstructure(Config()))
    assert documented == every


def test_example__values_are_the_defaults():
    assert config_module.structure(tomllib.loads(EXAMPLE.read_text())) == Config()


def test_load__without_file_or_environment_gives_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no config.toml here
    assert load(env={}) == Config()


def test_load__reads_config_toml_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.toml").write_text("[server]\nport = 8181\n")
    assert load(env={}).server.port == 8181


def test_load__reads_the_given_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[server]\nport = 9999\nweb_base_url = "https://rfp.example.org"\n')
    config = load(path, env={})
    assert config.server.port == 9999
    assert config.server.web_base_url == "https://rfp.example.org"


def test_load__rfp_config_names_the_file(tmp_path):
    path = tmp_path / "elsewhere.toml"
    path.write_text("[server]\nworkers = 3\n")
    assert load(env={"RFP_CONFIG": str(path)}).server.workers == 3


def test_load__rfp_embeddings_sets_the_backend_and_is_checked(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[embeddings]\nbackend = "onnx"\n')
    assert load(path, env={"RFP_EMBEDDINGS": "none"}).embeddings.backend == "none"
    with pytest.raises(ConfigError, match=r"embeddings\.backend"):
        load(path, env={"RFP_EMBEDDINGS": "torch"})


def test_load__missing_rfp_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load(env={"RFP_CONFIG": str(tmp_path / "nope.toml")})


def test_load__environment_overrides_the_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[server]\nport = 9999\n[database]\nurl = "postgresql://file/db"\ndata_dir = "/file"\n')
    config = load(
        path,
        env={"PORT": "7000", "DATABASE_URL": "postgresql://env/db", "RFP_DATA_DIR": "/env"},
    )
    assert config.server.port == 7000
    assert config.database.url == "postgresql://env/db"
    assert config.database.data_dir == "/env"


def test_load__port_from_environment_must_be_an_integer():
    with pytest.raises(ConfigError, match=r"^PORT: must be an integer, got 'abc'$"):
        load(env={"PORT": "abc"})


def test_load__invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[server\n")
    with pytest.raises(ConfigError, match=r"config\.toml: not valid TOML"):
        load(path, env={})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), "cannot be read: Is a directory"),
        (lambda path: path.write_bytes(b"[server]\nhost = '\xff'\n"), "not valid TOML: not UTF-8"),
    ],
)
def test_load__unreadable_file_is_an_error_naming_it(tmp_path, make, message):
    # A probe: a directory or a Latin-1 file where config.toml was expected ended in a traceback.
    path = tmp_path / "config.toml"
    make(path)
    with pytest.raises(ConfigError, match=f"config\\.toml: {message}"):
        load(path, env={})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[server]\nport = 70000", "server.port: must be a TCP port"),
        ('[server]\nport = "8080"', "server.port: must be an integer"),
        ("[server]\nworkers = 0", "server.workers: must be greater than 0"),
        ('[server]\nweb_base_url = "ftp://x"', "server.web_base_url: must start with http"),
        ("[server]\nmax_body_bytes = -1", "server.max_body_bytes: must be greater than 0"),
        ("[database]\npool_max_size = 0", "database.pool_max_size: must be greater than 0"),
        ("[database]\nhost = 'x'", "database.host: unknown setting"),
        ('[logging]\nlevel = "LOUD"', "logging.level: must be one of DEBUG, INFO, WARNING, ERROR"),
        ('[logging]\njson = "yes"', "logging.json: must be true or false"),
        ("[auth]\ntoken_ttl_days = -1", "auth.token_ttl_days: must be 0 or more"),
        ("[rate_limits.ask_question]\nlimit = 5", "rate_limits.ask_question.period_seconds: is required"),
        ("[rate_limits.ask_question]\nlimit = 0\nperiod_seconds = 60",
         "rate_limits.ask_question.limit: must be greater than 0"),
        ("colour = 'blue'", "colour: unknown setting"),
        ("[webhooks]\nretry_for_seconds = nan", "webhooks.retry_for_seconds: must be a finite number"),
        ("[mail]\ntimeout_seconds = inf", "mail.timeout_seconds: must be a finite number"),
        ("[housekeeping]\nevery_seconds = 1e-9",
         "housekeeping.every_seconds: must be 0 (never) or at least 60 seconds"),
        ("[housekeeping]\nevery_seconds = nan", "housekeeping.every_seconds: must be a finite number"),
        # A section given a value (a probe: "invalid value for type, expected ServerConfig").
        ("server = 5", "server: must be a table of settings (a [section] in TOML), not a single value"),
        ('[rate_limits]\nask_question = "fast"', "rate_limits.ask_question: must be a table of settings"),
        ("rate_limits = 3", "rate_limits: must be a table of settings"),
    ],
)
def test_load__bad_setting_is_an_error_naming_it(tmp_path, toml, message):
    path = tmp_path / "config.toml"
    path.write_text(toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load(path, env={})
    assert message in str(caught.value)


def _without_database(env: os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("DATABASE_URL", "RFP_CONFIG", "PORT")}


@pytest.mark.parametrize(
    ("env", "message"),
    [({"PORT": "abc"}, "PORT: must be an integer"), ({"PORT": "99999"}, "server.port: must be a TCP port")],
)
def test_serve__bad_setting_stops_start_up_naming_it(tmp_path, env, message):
    # Runs in an empty directory with no DATABASE_URL: it must fail before starting a database.
    result = subprocess.run(
        [sys.executable, "-m", "service", "serve"],
        cwd=tmp_path,
        env={**_without_database(os.environ), "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "var").exists()


def test_serve__bad_option_stops_start_up_naming_its_setting(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--workers", "0"],
        cwd=tmp_path, env={**_without_database(os.environ), "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )
    assert (result.returncode, result.stderr) == (
        2, "error: invalid configuration: server.workers: must be greater than 0, got 0\n")
    assert not (tmp_path / "var").exists()


def test_serve__rate_limit_of_no_route_stops_start_up_naming_it(tmp_path):
    """A probe: a misspelt route ([rate_limits.ask_questoin]) started the service with no limit on
    asking, the default's section replaced by one that limits nothing."""
    (tmp_path / "config.toml").write_text("[rate_limits.ask_questoin]\nlimit = 5\nperiod_seconds = 60\n")
    result = subprocess.run(
        [sys.executable, "-m", "service", "serve"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**_without_database(os.environ), "PYTHONPATH": str(ROOT),
             "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"},  # checked before connecting
    )
    assert (result.returncode, result.stderr) == (2, (
        "error: invalid configuration: rate_limits.ask_questoin: no route has this name "
        "(did you mean ask_question? the names are in service/web/app.py routes())\n"))


@pytest.mark.parametrize("data_dir", ["a-file", "a-file/below"])
def test_migrate__unusable_data_dir_is_one_error_line_naming_it(tmp_path, data_dir):
    # A probe: RFP_DATA_DIR naming a file, or a path under one, ended in a traceback (FileExistsError).
    (tmp_path / "a-file").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "service", "migrate"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**_without_database(os.environ), "PYTHONPATH": str(ROOT), "RFP_DATA_DIR": data_dir},
    )
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"error: database.data_dir: cannot keep the embedded PostgreSQL's data in {data_dir}/pg: ")


def test_web_base_url__follows_the_port_served_on():
    # The default link base pointed at :8080 whatever PORT said (issue 18).
    assert load(env={"PORT": "9123"}).server.web_base_url == "http://localhost:9123"
    assert Config().server.web_base_url == "http://localhost:8080"


def test_web_base_url__set_explicitly_is_kept_whatever_the_port():
    config = config_module.structure({"server": {"port": 9123, "web_base_url": "https://rfp.example.org"}})
    assert config.server.web_base_url == "https://rfp.example.org"


def test_load__a_rate_limit_section_keeps_the_other_routes_defaults(tmp_path):
    """A probe: a [rate_limits.<route>] section for another route replaced the whole table, so
    asking questions was left unlimited."""
    path = tmp_path / "config.toml"
    path.write_text("[rate_limits.create_rfp]\nlimit = 100\nperiod_seconds = 60\n")
    limits = load(path, env={}).rate_limits
    assert (limits["create_rfp"].limit, limits["ask_question"].limit) == (100, 10)
    path.write_text("[rate_limits.ask_question]\nlimit = 3\nperiod_seconds = 1\n")
    assert load(path, env={}).rate_limits["ask_question"].limit == 3


@pytest.mark.parametrize(("value", "on"), [("1", True), ("on", True), ("TRUE", True), ("yes", True),
                                           ("0", False), ("off", False), ("", False), ("no", False)])
def test_env__flags_read_on_and_off(value, on):
    config = load(None, env={"RFP_LOG_JSON": value, "RFP_METRICS": value})
    assert (config.logging.json, config.metrics.enabled) == (on, on)


@pytest.mark.parametrize("name", ["RFP_LOG_JSON", "RFP_METRICS"])
def test_env__a_flag_neither_on_nor_off_is_an_error_naming_it(name):
    """A typo (`RFP_METRICS=ture`) was read as off without a word."""
    with pytest.raises(ConfigError) as caught:
        load(None, env={name: "ture"})
    assert str(caught.value).startswith(f"{name}: must be one of 1, true, yes, on (on)")
    assert "got 'ture'" in str(caught.value)
