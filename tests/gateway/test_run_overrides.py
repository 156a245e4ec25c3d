"""`run --api-host`: the api channel it moves is warned of as the same host in YAML would be."""

from __future__ import annotations

from pathlib import Path

from config import default_config, load_gateway
from gateway.cli.run_overrides import with_listen_overrides
from tests.support.daemon import write_config

EXPOSED = "listens on 0.0.0.0 without auth_token"


def exposure_warnings(warnings: list[object]) -> list[str]:
    return [str(warning) for warning in warnings if "without auth_token" in str(warning)]


def test_the_embedded_default_moved_beyond_loopback_is_warned_of() -> None:
    loaded = default_config()
    assert exposure_warnings(list(loaded.warnings)) == []
    moved = with_listen_overrides(loaded, api_host="0.0.0.0")
    (warning,) = exposure_warnings(list(moved.warnings))
    assert EXPOSED in warning


def test_a_yaml_host_moved_back_to_loopback_is_no_longer_warned_of(tmp_path: Path) -> None:
    profiles = {
        "web": "agent: {type: echo}\nchannels: [{type: api, host: 0.0.0.0, port: 0}]\n",
        "quiet": "agent: {type: echo}\nchannels: []\n",
    }
    loaded = load_gateway(write_config(tmp_path, profiles), {})
    (warning,) = exposure_warnings(list(loaded.warnings))
    assert warning.startswith(f"{tmp_path / 'profiles' / 'web.yaml'}:")
    port_only = with_listen_overrides(loaded, api_port=0)
    assert [str(w) for w in port_only.warnings] == [str(w) for w in loaded.warnings]
    moved_back = with_listen_overrides(loaded, api_host="127.0.0.1")
    assert exposure_warnings(list(moved_back.warnings)) == []
    # The other profile's warning stays.
    assert [str(w) for w in moved_back.warnings] == [
        str(w) for w in loaded.warnings if str(w) != warning
    ]
    assert any("quiet.yaml" in str(w) for w in moved_back.warnings)
