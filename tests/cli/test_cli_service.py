"""The CLI over a running service: `hearth list|show|ps|rm|cp|create|run|stop|pull`,
`hearth import-ollama`, and `hearth serve` refusing unsafe or impossible settings."""

from __future__ import annotations

import hashlib
import json
import socket

import pytest

from support.cli import hearth

pytestmark = pytest.mark.slow


def test_list_show_create_cp_rm(live_server, tiny_llama_path, tmp_path):
    out = hearth("list", server=live_server)
    assert out.returncode == 0 and "gemma3:270m" in out.stdout and "NAME" in out.stdout
    show = hearth("show", "gemma3:270m", server=live_server)
    assert "gemma3" in show.stdout and "completion" in show.stdout and "Q4_K_M" in show.stdout
    assert "<start_of_turn>" in hearth("show", "gemma3:270m", "--template",
                                       server=live_server).stdout  # fmt: skip

    made = hearth("create", "tiny", "-f", str(tiny_llama_path), "--link", server=live_server)
    assert made.returncode == 0, made.stderr
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text('FROM tiny\nPARAMETER temperature 0.1\nPARAMETER stop "END"\n'
                         'SYSTEM """You are\nbrief."""\n')  # fmt: skip
    made = hearth("create", "tiny2", "-f", str(modelfile), server=live_server)
    assert made.returncode == 0, made.stderr
    params = hearth("show", "tiny2", "--parameters", server=live_server).stdout
    assert "temperature" in params and '"END"' in params
    assert hearth("show", "tiny2", "--system", server=live_server).stdout == "You are\nbrief.\n"

    assert hearth("cp", "tiny2", "me/tiny3:v1", server=live_server).returncode == 0
    names = hearth("list", server=live_server).stdout
    assert "tiny:latest" in names and "me/tiny3:v1" in names
    assert hearth("rm", "me/tiny3:v1", "tiny2", "tiny", server=live_server).returncode == 0
    gone = hearth("rm", "tiny", server=live_server)
    assert gone.returncode == 1 and "not found" in gone.stderr and "Traceback" not in gone.stderr
    pull = hearth("pull", "llama3.2", server=live_server)
    assert pull.returncode == 1 and "offline" in pull.stderr


def test_run_ps_and_stop_use_the_running_service(live_server):
    run = hearth("run", "gemma3:270m", "Hello", "--num-predict", "4", "--num-ctx", "1024",
                 "--verbose", server=live_server)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() and "generation: 4 tokens" in run.stderr
    ps = hearth("ps", server=live_server)
    assert "gemma3:270m" in ps.stdout and "CPU" in ps.stdout
    assert hearth("stop", "gemma3:270m", server=live_server).returncode == 0
    assert "gemma3:270m" not in hearth("ps", server=live_server).stdout


def test_import_ollama(tmp_path, tiny_llama_path):
    source = tmp_path / "ollama"
    (source / "blobs").mkdir(parents=True)
    data = tiny_llama_path.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (source / "blobs" / digest.replace(":", "-")).write_bytes(data)
    manifest = source / "manifests/registry.ollama.ai/library/tinyllama/latest"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": digest,
             "size": len(data)}  # fmt: skip
    manifest.write_text(json.dumps({"layers": [layer]}))
    env = {"HEARTH_HOME": str(tmp_path / "home")}
    out = hearth("import-ollama", "--source", str(source), env=env)
    assert out.returncode == 0, out.stderr
    assert "imported  tinyllama:latest" in out.stdout and "1 of 1" in out.stdout
    missing = hearth("import-ollama", "--source", str(tmp_path / "none"), env=env)
    assert missing.returncode == 1 and "no Ollama models" in missing.stderr


def test_serve_refuses_the_network_without_a_key_and_a_busy_port():
    env = {"HEARTH_API_KEY": ""}
    out = hearth("serve", "--host", "0.0.0.0", "--port", "0", env=env, timeout=60)
    assert out.returncode == 1 and "HEARTH_API_KEY" in out.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        out = hearth("serve", "--port", port, timeout=60)
    assert out.returncode == 1 and "cannot listen" in out.stderr and "Traceback" not in out.stderr
