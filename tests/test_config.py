"""Config validation: unknown keys, wrong types, out-of-range values, bad TOML -- one clear line each."""

from __future__ import annotations

import pytest

from flows.config import ReleaseFlowConfig, load_config, parse_config
from mdp_core.errors import InputError


def test_default_config_is_valid_and_small():
    cfg = load_config(None)
    assert isinstance(cfg, ReleaseFlowConfig)
    assert cfg.dataset.kind == "grid" and cfg.privacy.epsilon is None  # the dataset's own eps


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"privacy": {"epsilon": 0}}, "privacy.epsilon"),
        ({"privacy": {"epsilon": -1.0}}, "greater than 0"),
        ({"privacy": {"eta": "2"}}, "privacy.eta"),
        ({"privacy": {"epsilon": float("nan")}}, "privacy.epsilon"),
        ({"solve": {"method": "magic"}}, "solve.method"),
        ({"solve": {"threads": -1}}, "solve.threads"),
        ({"partition": {"subsets": 0}}, "partition.subsets"),
        ({"bogus": 1}, "bogus: unknown key"),
        ({"privacy": {"epsilon": 1.0, "delta": 0.1}}, "privacy.delta: unknown key"),
        ({"dataset": {"kind": "grid", "params": {"rows": 3, "colz": 4}}}, "colz"),
        ({"dataset": {"kind": "grid", "params": {"epsilon": 3.0}}}, "[privacy]"),
        ({"release": {"n_individuals": 1.5}}, "release.n_individuals"),
    ],
)
def test_bad_config_values_are_named(data, fragment):
    with pytest.raises(InputError) as err:
        parse_config(data, "cfg.toml")
    assert fragment in str(err.value)
    assert str(err.value).startswith("cfg.toml:")
    assert "\n" not in str(err.value)


def test_toml_file_round_trip(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('store = "s"\n[privacy]\nepsilon = 5\neta = 1.5\n[dataset]\nkind = "synthetic"\nparams = { n_records = 30 }\n')
    cfg = load_config(p)
    assert cfg.privacy.epsilon == 5.0 and cfg.dataset.params == {"n_records": 30} and cfg.store == "s"


def test_unreadable_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[privacy\nepsilon = ")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(InputError, match="no such config file"):
        load_config(tmp_path / "absent.toml")
