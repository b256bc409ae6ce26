"""The MCP config: Claude Desktop's shape read as it is, every field's mistake a sentence
naming the server and the field, and a round trip that loses nothing."""

from __future__ import annotations

import json

import pytest

from hearth.agent.config import (
    ConfigError,
    ServerConfig,
    default_config_path,
    dump_config,
    load_config_file,
    parse_config,
    save_config_file,
)

CLAUDE_DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
            "env": {"DEBUG": "1", "PORT": 8080},
        },
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
        "off": {
            "command": "uvx",
            "args": ["mcp-server-git"],
            "disabled": True,
            "autoApprove": ["x"],
        },
        "typed": {"type": "streamable-http", "url": "http://127.0.0.1:9/mcp"},
    }
}


def test_a_pasted_claude_desktop_config_reads_as_it_is():
    servers = parse_config(json.dumps(CLAUDE_DESKTOP))
    assert list(servers) == ["filesystem", "remote", "off", "typed"]
    fs = servers["filesystem"]
    assert fs.transport == "stdio" and fs.command == "npx" and fs.enabled
    assert fs.args == ("-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop")
    assert fs.env == {"DEBUG": "1", "PORT": "8080"} and fs.cwd is None
    remote = servers["remote"]
    assert remote.transport == "http" and remote.headers == {"Authorization": "Bearer x"}
    assert not servers["off"].enabled and servers["off"].extra == {"autoApprove": ["x"]}
    assert servers["typed"].transport == "http"


def test_the_round_trip_keeps_every_field_and_unknown_keys():
    servers = parse_config(CLAUDE_DESKTOP)
    assert parse_config(dump_config(servers)) == servers
    dumped = dump_config(servers)["mcpServers"]
    assert dumped["off"]["disabled"] is True and dumped["off"]["autoApprove"] == ["x"]
    assert dumped["typed"]["type"] == "streamable-http"
    assert parse_config({"servers": {"a": {"command": "x"}}}) == {"a": ServerConfig("a", "x")}


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ("{not json", ["not valid JSON"]),
        ({"other": {}}, ['no "mcpServers"']),
        ({"mcpServers": []}, ['"mcpServers" must be an object']),
        ({"mcpServers": {"a": {}}}, ["server 'a'", '"command"', '"url"']),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, ["server 'a'", "both"]),
        ({"mcpServers": {"b": {"command": "x", "args": "-v"}}}, ["server 'b'", '"args"']),
        (
            {"mcpServers": {"c": {"command": "x", "env": {"K": None}}}},
            ["server 'c'", '"env"', "'K'"],
        ),
        ({"mcpServers": {"d": {"url": "ftp://h/x"}}}, ["server 'd'", '"url"', "http"]),
        ({"mcpServers": {"e": {"type": "sse", "url": "http://h/sse"}}}, ["server 'e'", "SSE"]),
        ({"mcpServers": {"f": {"type": "stdio", "url": "http://h"}}}, ["server 'f'", '"type"']),
        ({"mcpServers": {"g": {"command": ""}}}, ["server 'g'", '"command"']),
        ({"mcpServers": {"h": {"command": "x", "disabled": "yes"}}}, ["server 'h'", '"disabled"']),
    ],
)
def test_each_mistake_is_a_sentence_naming_the_server_and_field(config, words):
    with pytest.raises(ConfigError) as e:
        parse_config(config)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_files_missing_damaged_and_saved_without_losing_other_keys(tmp_path):
    path = tmp_path / "mcp.json"
    with pytest.raises(ConfigError, match="no MCP config file"):
        load_config_file(path)
    assert load_config_file(path, missing_ok=True) == {}
    path.write_text('{"mcpServers": {"a": {"args": []}}}')
    with pytest.raises(ConfigError, match=r"mcp\.json: server 'a'"):
        load_config_file(path)
    path.write_text(json.dumps({"globalShortcut": "Ctrl+Space", "mcpServers": {}}))
    servers = parse_config(CLAUDE_DESKTOP)
    save_config_file(path, servers)
    assert load_config_file(path) == servers
    assert json.loads(path.read_text())["globalShortcut"] == "Ctrl+Space"


def test_the_default_path_is_in_hearths_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    assert default_config_path() == tmp_path / "mcp.json"
