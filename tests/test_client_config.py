"""`memory-server client-config CLIENT`: every client's entry checked against the fields its documentation
gives, merged into existing files with `--write` (other servers kept, a backup first, unparsable files left
alone), and used for real: the HTTP entries' URL and header call tools on a running server, the stdio entries'
command, arguments and environment start a stdio MCP server that lists its tools."""

from __future__ import annotations

import base64
import json
import shlex
import stat
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

from memory_server.client_entries import default_file

from procs import ServerProcess, parse_fields, run_cli, server_env

JSON_CLIENTS = ("claude-desktop", "cursor", "vscode", "windsurf")
TOOLS = {
    "append_memory",
    "recall_memory",
    "replay_memory",
    "list_conversations",
    "remember",
    "recall",
    "search_memory",
    "recall_context",
    "forget",
}


def _strings() -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "string"}}


STRING_LIST = {"type": "array", "items": {"type": "string"}}
LOCAL = {"command": {"type": "string", "minLength": 1}, "args": STRING_LIST, "env": _strings()}


def _entry(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _file(key: str, *entries: dict[str, Any]) -> dict[str, Any]:
    servers = {"type": "object", "minProperties": 1, "additionalProperties": {"anyOf": list(entries)}}
    return {"type": "object", "required": [key], "properties": {key: servers}}


# Each client's server entry with the fields its documentation lists (see clients.py for where each is from).
SCHEMAS = {
    # Claude Desktop: local servers only, {command, args, env}; a remote one through mcp-remote, also local.
    "claude-desktop": _file("mcpServers", _entry(LOCAL, ["command", "args"])),
    # Cursor: {command, args, env} or {url, headers}.
    "cursor": _file(
        "mcpServers", _entry(LOCAL, ["command"]), _entry({"url": {"type": "string"}, "headers": _strings()}, ["url"])
    ),
    # VS Code: "servers", with a required type: stdio {command, args, env} or http {url, headers}.
    "vscode": _file(
        "servers",
        _entry({"type": {"const": "stdio"}, **LOCAL}, ["type", "command"]),
        _entry({"type": {"enum": ["http", "sse"]}, "url": {"type": "string"}, "headers": _strings()}, ["type", "url"]),
    ),
    # Windsurf: {command, args, env} or {serverUrl, headers} (a Cursor-style `url` does not connect there).
    "windsurf": _file(
        "mcpServers",
        _entry(LOCAL, ["command"]),
        _entry({"serverUrl": {"type": "string"}, "headers": _strings()}, ["serverUrl"]),
    ),
    # Claude Code's .mcp.json: {type: stdio, command, args, env} or {type: http, url, headers}.
    "claude-code": _file(
        "mcpServers",
        _entry({"type": {"const": "stdio"}, **LOCAL}, ["command"]),
        _entry({"type": {"const": "http"}, "url": {"type": "string"}, "headers": _strings()}, ["type", "url"]),
    ),
    # Codex's config.toml: [mcp_servers.NAME] with command, args, env, env_vars, or url and http_headers or
    # env_http_headers (a header's name to the variable holding its value).
    "codex": _file(
        "mcp_servers",
        _entry({**LOCAL, "env_vars": STRING_LIST}, ["command"]),
        _entry({"url": {"type": "string"}, "http_headers": _strings(), "env_http_headers": _strings()}, ["url"]),
    ),
}


def config(*args: str, data_dir: Path, home: Path | None = None, **env: str) -> tuple[str, str, int]:
    home_env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "CODEX_HOME": ""} if home else {}
    done = run_cli("client-config", *args, data_dir=data_dir, env=server_env(**home_env, **env))
    return done.stdout, done.stderr, done.returncode


def parsed(client: str, text: str) -> dict[str, Any]:
    """The printed entry as the client's file would hold it (Claude Code's command line read back as its
    .mcp.json entry)."""
    if client == "codex":
        return tomllib.loads(text)
    if client == "claude-code":
        return {"mcpServers": {"memory": claude_code_entry(text)}}
    return dict(json.loads(text))


def claude_code_entry(line: str) -> dict[str, Any]:
    """`claude mcp add NAME --transport T ...` read back (the name first: `--env` takes several values)."""
    words = shlex.split(line)
    assert words[:4] == ["claude", "mcp", "add", "memory"]
    transport = words[words.index("--transport") + 1]
    if transport == "http":
        url = words[words.index("--transport") + 2]
        headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "--header")
        return {"type": "http", "url": url, "headers": headers}
    env = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--env")
    dashes = words.index("--")
    return {"type": "stdio", "command": words[dashes + 1], "args": words[dashes + 2 :], "env": env}


def credential(err: str) -> tuple[str, str]:
    """The variable (or VS Code input) and the header value the notes on stderr say to set."""
    lines = err.strip().splitlines()
    for line in lines:
        if line.strip().startswith("export "):
            variable, _, value = line.strip().removeprefix("export ").partition("=")
            return variable, shlex.split(value)[0]
    vscode = next(line for line in lines if line.startswith("VS Code asks for the header"))
    return vscode.split("(", 1)[1].split(")", 1)[0], lines[lines.index(vscode) + 1].strip()


def remote(client: str, document: dict[str, Any], err: str) -> tuple[str, dict[str, str]]:
    """The URL and headers an HTTP entry makes its client send (mcp-remote's for Claude Desktop), with the
    variable it names set as stderr said."""
    server = next(iter(document[{"vscode": "servers", "codex": "mcp_servers"}.get(client, "mcpServers")].values()))
    if client == "claude-desktop":
        args, env = server["args"], server["env"]
        headers = {}
        for i, arg in enumerate(args):
            if arg == "--header":
                name, value = args[i + 1].split(":", 1)
                headers[name] = value.replace("${AUTH_HEADER}", env["AUTH_HEADER"])
        return args[args.index("mcp-remote") + 1], headers
    variable, value = credential(err)
    if client == "codex":
        assert server["env_http_headers"] == {"Authorization": variable}
        return server["url"], {"Authorization": value}
    named = {"claude-code": "${%s}", "vscode": "${input:%s}"}.get(client, "${env:%s}") % variable
    assert server["headers"] == {"Authorization": named}  # a reference, never the credential
    return server.get("url") or server["serverUrl"], {"Authorization": value}


def local(client: str, document: dict[str, Any]) -> tuple[str, list[str], dict[str, str]]:
    server = next(iter(document[{"vscode": "servers", "codex": "mcp_servers"}.get(client, "mcpServers")].values()))
    return server["command"], server["args"], server["env"]


# --- stdio -------------------------------------------------------------------------------------------------


def test_stdio_entries_fit_each_clients_schema_and_carry_the_transport_in_env(tmp_path: Path) -> None:
    data = tmp_path / "data"
    launches = set()
    for client in (*JSON_CLIENTS, "claude-code", "codex"):
        out, err, code = config(client, data_dir=data)
        assert code == 0, err
        document = parsed(client, out)
        jsonschema.validate(document, SCHEMAS[client])
        command, args, env = local(client, document)
        assert env["MEMORY_TRANSPORT"] == "stdio" and "--transport" not in args  # a launcher cannot take it
        assert args[args.index("--data-dir") + 1] == str(data.resolve())
        launches.add((command, tuple(args), tuple(sorted(env.items()))))
    assert len(launches) == 1  # one launch, in six clients' words

    out, _, code = config("vscode", "--site", "team-local", data_dir=data)
    assert code == 0 and local("vscode", parsed("vscode", out))[2]["MEMORY_STDIO_SITE"] == "team-local"
    _, err, code = config("cursor", "--token", data_dir=data)
    assert code == 1 and err.strip().startswith("error: a stdio server needs no credential")


@pytest.mark.parametrize("client", ["claude-desktop", "codex", "claude-code"])
async def test_a_stdio_entry_starts_a_server_that_lists_its_tools(tmp_path: Path, client: str) -> None:
    data = tmp_path / "data"
    out, err, code = config(client, data_dir=data)
    assert code == 0, err
    command, args, env = local(client, parsed(client, out))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()  # clients start servers in a directory of their own
    transport = StdioTransport(command=command, args=args, env=env, cwd=str(elsewhere), keep_alive=False)
    async with Client(transport, timeout=60) as session:
        assert {tool.name for tool in await session.list_tools()} == TOOLS
        ack = await session.call_tool("append_memory", {"conversation_id": "conv-config-0001", "items": [{"a": 1}]})
        assert ack.structured_content["first_seq"] == 0


# --- HTTP --------------------------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Any:
    process = ServerProcess(tmp_path / "served").start().wait_ready()
    try:
        yield process
    finally:
        process.kill()


async def test_http_entries_with_a_new_token_fit_each_schema_and_call_tools(server: ServerProcess) -> None:
    for n, client in enumerate((*JSON_CLIENTS, "claude-code", "codex")):
        out, err, code = config(
            client,
            "--transport",
            "http",
            "--token",
            "--bucket",
            "agents",
            data_dir=server.data_dir,
            MEMORY_PORT=str(server.port),
        )
        assert code == 0, err
        assert "made token " in err
        document = parsed(client, out)
        jsonschema.validate(document, SCHEMAS[client])
        url, headers = remote(client, document, err)
        assert url == server.url and headers["Authorization"].startswith("Bearer mst_")
        assert (headers["Authorization"] in out) == (client == "claude-desktop")  # its file expands nothing
        async with Client(StreamableHttpTransport(url, headers=headers), timeout=60) as session:
            made = await session.call_tool(
                "remember", {"content": f"Client {client} was set up ({n}).", "bucket": "agents"}
            )
            assert made.structured_content["created"] is True
            outside = await session.call_tool(
                "remember", {"content": "Out of bounds.", "bucket": "other"}, raise_on_error=False
            )
            assert outside.is_error and outside.content[0].text.startswith("forbidden: ")  # the token's bounds
    listed = run_cli("token", "list", "--site", "default", data_dir=server.data_dir).stdout
    assert listed.count("buckets=agents") == 6
    for client in (*JSON_CLIENTS, "claude-code", "codex"):  # each labelled with its client's name
        assert listed.count(f"label: {client}\t") == 1


async def test_http_entry_with_the_site_credential_reaches_the_logs(server: ServerProcess) -> None:
    secret = parse_fields(server.log())["secret"]
    out, err, code = config(
        "cursor", "--transport", "http", "--secret", secret, data_dir=server.data_dir, MEMORY_PORT=str(server.port)
    )
    assert code == 0, err
    url, headers = remote("cursor", parsed("cursor", out), err)
    assert headers["Authorization"] == "Basic " + base64.b64encode(f"default:{secret}".encode()).decode()
    async with Client(StreamableHttpTransport(url, headers=headers), timeout=60) as session:
        ack = await session.call_tool("append_memory", {"conversation_id": "conv-config-0002", "items": [{"b": 2}]})
        assert ack.structured_content["first_seq"] == 0  # log tools need the site's Basic credential

    _, err, code = config("cursor", "--transport", "http", "--secret", "not-it", data_dir=server.data_dir)
    assert code == 1 and err.strip() == (
        "error: that is not the secret of site 'default' (memory-server site "
        "rotate default issues a new one; or pass --token for a new scoped token)"
    )
    _, err, code = config(
        "cursor", "--transport", "http", "--site", "nobody", "--secret", "x", data_dir=server.data_dir
    )
    assert code == 1 and "no site named 'nobody'" in err


def test_a_site_a_stdio_server_created_has_no_secret_to_configure(tmp_path: Path) -> None:
    from memory_server.admin.serve import UNISSUED_SECRET
    from memory_server.storage.factory import open_storage

    from conftest import make_settings

    data = tmp_path / "data"
    storage = open_storage(make_settings(data))
    try:
        storage.sites.create_site("default", UNISSUED_SECRET)  # as a stdio server creates it
    finally:
        storage.close()
    _, err, code = config("windsurf", "--transport", "http", "--secret", "anything", data_dir=data)
    assert code == 1 and "site 'default' has no secret yet" in err and "memory-server site rotate default" in err


# --- --write -----------------------------------------------------------------------------------------------


def test_write_merges_into_claude_desktops_file_keeping_other_servers_with_a_backup(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    target = home / ".config" / "Claude" / "claude_desktop_config.json"
    target.parent.mkdir(parents=True)
    before = {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"]}
        },
    }
    target.write_text(json.dumps(before, indent=4))
    target.chmod(0o640)

    out, err, code = config("claude-desktop", "--write", data_dir=data, home=home)
    assert code == 0, err
    after = json.loads(target.read_text())
    assert after["globalShortcut"] == "Ctrl+Space"
    assert after["mcpServers"]["filesystem"] == before["mcpServers"]["filesystem"]
    assert after["mcpServers"]["memory"] == json.loads(out)["mcpServers"]["memory"]
    backups = list(target.parent.glob("claude_desktop_config.json.*.bak"))
    assert len(backups) == 1 and json.loads(backups[0].read_text()) == before
    assert f"wrote 'memory' to {target}" in err and str(backups[0]) in err
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file keeps its permissions

    _, err, code = config("claude-desktop", "--write", data_dir=data, home=home)  # the same again
    assert code == 0 and "nothing changed" in err
    assert len(list(target.parent.glob("*.bak"))) == 1

    _, err, code = config("claude-desktop", "--write", "--site", "other", data_dir=data, home=home)
    assert code == 1 and "already has a server named 'memory'" in err and "--replace" in err
    assert json.loads(target.read_text()) == after  # refused: untouched
    _, err, code = config("claude-desktop", "--write", "--site", "other", "--replace", data_dir=data, home=home)
    assert code == 0, err
    replaced = json.loads(target.read_text())
    assert replaced["mcpServers"]["memory"]["env"]["MEMORY_STDIO_SITE"] == "other"
    assert replaced["mcpServers"]["filesystem"] == before["mcpServers"]["filesystem"]
    assert len(list(target.parent.glob("*.bak"))) == 2


@pytest.mark.parametrize(
    "client,relative", [("cursor", ".cursor/mcp.json"), ("windsurf", ".codeium/windsurf/mcp_config.json")]
)
def test_write_creates_the_clients_file_where_it_reads_it(tmp_path: Path, client: str, relative: str) -> None:
    home = tmp_path / "home"
    _, err, code = config(client, "--write", data_dir=tmp_path / "data", home=home)
    assert code == 0, err
    written = json.loads((home / relative).read_text())
    jsonschema.validate(written, SCHEMAS[client])
    assert stat.S_IMODE((home / relative).stat().st_mode) == 0o600 and not list((home / relative).parent.glob("*.bak"))


def test_write_refuses_a_file_that_does_not_parse(tmp_path: Path) -> None:
    target = tmp_path / "mcp.json"
    broken = '{\n  // my servers\n  "servers": {}\n}\n'  # comments: not JSON
    target.write_text(broken)
    _, err, code = config("vscode", "--write", "--config-file", str(target), data_dir=tmp_path / "data")
    assert code == 1 and err.strip().splitlines()[-1].startswith(f"error: {target} is not valid JSON")
    assert "line 2" in err
    assert target.read_text() == broken and not list(tmp_path.glob("*.bak"))

    toml = tmp_path / "config.toml"
    toml.write_text("model = \n")
    _, err, code = config("codex", "--write", "--config-file", str(toml), data_dir=tmp_path / "data")
    assert code == 1 and "is not valid TOML" in err and toml.read_text() == "model = \n"


def test_write_into_vscodes_servers_keeps_its_inputs(tmp_path: Path) -> None:
    target = tmp_path / ".vscode" / "mcp.json"
    target.parent.mkdir()
    before = {
        "inputs": [{"type": "promptString", "id": "key", "description": "API key", "password": True}],
        "servers": {
            "perplexity": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "server-perplexity-ask"],
                "env": {"PERPLEXITY_API_KEY": "${input:key}"},
            }
        },
    }
    target.write_text(json.dumps(before))
    _, err, code = config("vscode", "--write", "--config-file", str(target), data_dir=tmp_path / "data")
    assert code == 0, err
    after = json.loads(target.read_text())
    jsonschema.validate({"servers": {"memory": after["servers"]["memory"]}}, SCHEMAS["vscode"])
    assert after["inputs"] == before["inputs"] and after["servers"]["perplexity"] == before["servers"]["perplexity"]


def test_write_into_codexs_toml_keeps_every_other_table(tmp_path: Path) -> None:
    home = tmp_path / "home"
    target = home / ".codex" / "config.toml"
    target.parent.mkdir(parents=True)
    before = (
        'model = "o4-mini"  # the default model\n\n[mcp_servers.docs]\ncommand = "npx"\n'
        'args = ["-y", "docs-mcp"]\n\n[mcp_servers.docs.env]\nDOCS_TOKEN = "t0k"\n\n[profiles.fast]\n'
        'model = "o4-mini"\n'
    )
    target.write_text(before)
    _, err, code = config("codex", "--write", data_dir=tmp_path / "data", home=home)
    assert code == 0, err
    after = tomllib.loads(target.read_text())
    old = tomllib.loads(before)
    assert after["model"] == old["model"] and after["profiles"] == old["profiles"]
    assert after["mcp_servers"]["docs"] == old["mcp_servers"]["docs"]
    jsonschema.validate({"mcp_servers": {"memory": after["mcp_servers"]["memory"]}}, SCHEMAS["codex"])
    assert target.read_text().startswith(before)  # the user's text, comments included, is untouched
    assert [b.read_text() for b in target.parent.glob("config.toml.*.bak")] == [before]

    _, err, code = config("codex", "--write", "--site", "other", "--replace", data_dir=tmp_path / "data", home=home)
    assert code == 0, err
    replaced = tomllib.loads(target.read_text())
    assert replaced["mcp_servers"]["memory"]["env"]["MEMORY_STDIO_SITE"] == "other"
    assert replaced["mcp_servers"]["docs"] == old["mcp_servers"]["docs"] and replaced["profiles"] == old["profiles"]
    assert target.read_text().count("[mcp_servers.memory]") == 1


def test_write_refuses_codex_servers_written_as_an_inline_table(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    before = 'mcp_servers = { docs = { command = "npx" } }\n'
    target.write_text(before)
    _, err, code = config("codex", "--write", "--config-file", str(target), data_dir=tmp_path / "data")
    assert code == 1 and "cannot be added without changing how the file reads" in err
    assert target.read_text() == before and not list(tmp_path.glob("*.bak"))


def test_claude_code_and_vscode_write_into_the_project_they_are_run_in(tmp_path: Path) -> None:
    assert default_file("claude-code", home=tmp_path / "h", cwd=tmp_path / "p") == tmp_path / "p" / ".mcp.json"
    assert default_file("vscode", home=tmp_path / "h", cwd=tmp_path / "p") == tmp_path / "p" / ".vscode" / "mcp.json"
    assert default_file("cursor", home=tmp_path / "h") == tmp_path / "h" / ".cursor" / "mcp.json"
    target = tmp_path / "p" / ".mcp.json"
    _, err, code = config("claude-code", "--write", "--config-file", str(target), data_dir=tmp_path / "data")
    assert code == 0, err
    jsonschema.validate(json.loads(target.read_text()), SCHEMAS["claude-code"])


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for args, says in (
        (["zed"], "unknown client 'zed'"),
        (["cursor", "--transport", "sse"], "--transport must be"),
        (["cursor", "--name", "my server"], "--name must be"),
        (["cursor", "--transport", "http", "--token", "--url", "ftp://x"], "--url must be"),
    ):
        _, err, code = config(*args, data_dir=data)
        assert code == 1 and err.count("\n") == 1 and says in err, (args, err)


# --- credentials: never in a project's file, private where they must be ------------------------------------


def _site(data: Path) -> str:
    made = run_cli("site", "create", "default", data_dir=data)
    assert made.returncode == 0, made.stderr
    return parse_fields(made.stdout)["secret"]


def _tokens(data: Path) -> list[list[str]]:
    listed = run_cli("token", "list", "--site", "default", data_dir=data).stdout
    return [line.split("\t") for line in listed.splitlines()[1:]]


@pytest.mark.parametrize("client", ["claude-code", "vscode", "cursor", "windsurf", "codex"])
def test_written_files_name_the_credential_never_hold_it(tmp_path: Path, client: str) -> None:
    data = tmp_path / "data"
    secret = _site(data)
    basic = base64.b64encode(f"default:{secret}".encode()).decode()
    target = tmp_path / "project" / ("config.toml" if client == "codex" else "mcp.json")
    for args in (["--token"], ["--secret", secret, "--name", "memory-basic"]):
        _, err, code = config(
            client, "--transport", "http", *args, "--write", "--config-file", str(target), data_dir=data
        )
        assert code == 0, err
        _, value = credential(err)  # stderr says what to set, and where
        assert value.startswith(("Bearer mst_", "Basic "))
    text = target.read_text()
    assert "mst_" not in text and basic not in text and secret not in text
    document = tomllib.loads(text) if client == "codex" else json.loads(text)
    jsonschema.validate(document, SCHEMAS[client])
    if client == "vscode":  # asked for once, as a password, kept in VS Code's secret storage
        assert {i["id"] for i in document["inputs"]} == {"mcp-memory-authorization", "mcp-memory-basic-authorization"}
        assert all(i["password"] is True and i["type"] == "promptString" for i in document["inputs"])


def test_stdio_entries_hold_no_secret_setting_and_pin_only_a_given_data_dir(tmp_path: Path) -> None:
    secrets = {
        "MEMORY_DATABASE_URL": "postgresql://memory:pw-not-in-files@db.example/memory",
        "MEMORY_QDRANT_API_KEY": "qdrant-key-not-in-files",
    }
    named = {
        "claude-code": "${MEMORY_DATABASE_URL}",
        "cursor": "${env:MEMORY_DATABASE_URL}",
        "vscode": "${env:MEMORY_DATABASE_URL}",
        "windsurf": "${env:MEMORY_DATABASE_URL}",
    }
    home = tmp_path / "home"
    env = server_env(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CODEX_HOME="", **secrets)
    for client in (*JSON_CLIENTS, "claude-code", "codex"):
        done = run_cli("client-config", client, env=env)  # no --data-dir, no MEMORY_DATA_DIR
        assert done.returncode == 0, done.stderr
        assert "pw-not-in-files" not in done.stdout and "qdrant-key-not-in-files" not in done.stdout
        document = parsed(client, done.stdout)
        jsonschema.validate(document, SCHEMAS[client])
        _, args, entry_env = local(client, document)
        assert "--data-dir" not in args and args[-1] == "serve"  # the per-user default applies
        server = document[{"vscode": "servers", "codex": "mcp_servers"}.get(client, "mcpServers")]["memory"]
        if client == "codex":
            assert server["env_vars"] == list(secrets)
        elif client == "claude-desktop":
            assert not set(secrets) & set(entry_env) and "MEMORY_DATABASE_URL" in done.stderr
        else:
            assert entry_env["MEMORY_DATABASE_URL"] == named[client]
    given = run_cli("client-config", "cursor", env={**env, "MEMORY_DATA_DIR": str(tmp_path / "d")})
    assert local("cursor", parsed("cursor", given.stdout))[1][-2:] == ["--data-dir", str((tmp_path / "d").resolve())]


def test_a_file_holding_a_credential_and_its_backups_are_the_owners_only(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    _site(data)
    target = home / ".config" / "Claude" / "claude_desktop_config.json"
    target.parent.mkdir(parents=True)
    target.write_text('{"mcpServers": {}}')
    target.chmod(0o644)
    _, err, code = config("claude-desktop", "--transport", "http", "--token", "--write", data_dir=data, home=home)
    assert code == 0, err
    assert "mst_" in target.read_text()  # Claude Desktop expands nothing: the credential is in the file
    _, err, code = config(
        "claude-desktop", "--transport", "http", "--token", "--write", "--replace", data_dir=data, home=home
    )
    assert code == 0, err
    backups = list(target.parent.glob("*.bak"))
    assert len(backups) == 2
    for path in (target, *backups):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_replacing_an_entry_revokes_the_token_it_held_or_says_it_is_live(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    _site(data)
    _, err, code = config("claude-desktop", "--transport", "http", "--token", "--write", data_dir=data, home=home)
    assert code == 0, err
    (first,) = _tokens(data)
    _, err, code = config(
        "claude-desktop", "--transport", "http", "--token", "--write", "--replace", data_dir=data, home=home
    )
    assert code == 0 and f"revoked token {first[0]}, which the replaced entry held" in err
    states = {row[0]: row[3] for row in _tokens(data)}
    assert states[first[0]].startswith("revoked") and list(states.values()).count("active") == 1

    _, err, code = config("cursor", "--transport", "http", "--token", "--write", data_dir=data, home=home)
    assert code == 0, err
    cursor_token = next(row[0] for row in _tokens(data) if row[4] == "label: cursor")
    _, err, code = config("cursor", "--transport", "http", "--token", "--write", "--replace", data_dir=data, home=home)
    assert code == 0, err
    assert "still live" in err and cursor_token in err and "memory-server token revoke" in err


def test_a_symbolic_link_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    real.write_text('{"mcpServers": {"other": {"command": "x"}}}')
    link = tmp_path / "home" / ".cursor" / "mcp.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    _, err, code = config("cursor", "--write", "--config-file", str(link), data_dir=tmp_path / "data")
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert set(json.loads(real.read_text())["mcpServers"]) == {"other", "memory"}
    assert f"through the link {link}" in err
    assert list(real.parent.glob("mcp.json.*.bak")) and not list(link.parent.glob("*.bak"))

    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    _, err, code = config("cursor", "--write", "--config-file", str(dangling), data_dir=tmp_path / "data")
    assert code == 1 and err.strip().splitlines()[-1].startswith(f"error: {dangling} is a symbolic link to")
    assert dangling.is_symlink() and not (tmp_path / "nowhere.json").exists()


def test_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    data = tmp_path / "data"
    _site(data)
    fifo = tmp_path / "mcp.json"
    os.mkfifo(fifo)
    _, err, code = config("cursor", "--write", "--config-file", str(fifo), data_dir=data)
    assert (
        code == 1
        and err.strip().splitlines()[-1] == f"error: {fifo} is not a regular file (a FIFO); nothing was written"
    )
    _, err, code = config("codex", "--write", "--config-file", "/dev/null", data_dir=data)
    assert code == 1 and "/dev/null is not a regular file (a device)" in err
    # A token made for an entry that could not be written is revoked: it would be live and in no file.
    _, err, code = config(
        "cursor", "--transport", "http", "--token", "--write", "--config-file", str(fifo), data_dir=data
    )
    assert code == 1 and "revoked the new token" in err
    assert [row[3].split()[0] for row in _tokens(data)] == ["revoked"]


def test_claude_code_project_write_says_it_must_be_approved(tmp_path: Path) -> None:
    target = tmp_path / "project" / ".mcp.json"
    _, err, code = config("claude-code", "--write", "--config-file", str(target), data_dir=tmp_path / "data")
    assert code == 0 and "Claude Code asks you to approve" in err
