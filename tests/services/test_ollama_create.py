"""Creating Ollama models from parsed Modelfiles, against the fake Ollama server over real HTTP."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import sys
import threading
from pathlib import Path

import httpx
import ollama
import pytest

from app.core.modelfile.parser import parse_modelfile
from app.services.ollama.client import OllamaError, OllamaService
from app.services.ollama.create import (
    CreatePlanError,
    CreateProgress,
    build_create_request,
    create_model,
    files_for_model,
    looks_like_path,
    plan_create,
    request_file_names,
)
from tests.support.fake_ollama import FakeOllama

GGUF = b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 8


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake():
    before = set(threading.enumerate())
    with FakeOllama() as server:
        server.add_model("llama3.2", system="base system", parameters={"temperature": 0.7})
        yield server
    assert not server.handler_errors
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


def plan_for(folder: Path, text: str, name: str = "Modelfile"):
    (folder / name).write_text(text, encoding="utf-8")
    return build_create_request(parse_modelfile(text), folder)


def create(fake, name, plan):
    seen: list[CreateProgress] = []

    async def scenario():
        service = OllamaService(fake.host)
        try:
            await create_model(service, name, plan, seen.append)
        finally:
            await service.close()

    run(scenario())
    return seen


def show(fake, name):
    async def scenario():
        service = OllamaService(fake.host)
        try:
            return await service.show(name)
        finally:
            await service.close()

    return run(scenario())


# --- the plan ---------------------------------------------------------------------------------------------------
MODELFILE = '''FROM ./weights/model.gguf
TEMPLATE """{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}"""
SYSTEM You are terse.
PARAMETER temperature 0.2
PARAMETER num_ctx 8192
PARAMETER stop <|eot|>
PARAMETER stop "</s>"
PARAMETER use_mmap false
MESSAGE user What is 2+2?
MESSAGE assistant It is: 4
LICENSE MIT
LICENSE """Apache License
Version 2.0"""
REQUIRES 0.12
RENDERER qwen3-coder
PARSER qwen3-coder
'''


def test_plan_from_a_local_gguf_is_the_structured_request(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.gguf").write_bytes(GGUF)
    plan = plan_for(tmp_path, MODELFILE)
    assert plan.request("mine") == {
        "model": "mine",
        "files": {"model.gguf": digest_of(GGUF)},
        "template": "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}",
        "system": "You are terse.",
        "requires": "0.12",
        "renderer": "qwen3-coder",
        "parser": "qwen3-coder",
        "license": ["MIT", "Apache License\nVersion 2.0"],
        "parameters": {"temperature": 0.2, "num_ctx": 8192, "stop": ["<|eot|>", "</s>"], "use_mmap": False},
        "messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "It is: 4"}],
    }
    assert isinstance(plan.parameters["num_ctx"], int) and isinstance(plan.parameters["temperature"], float)
    [blob] = plan.blobs()
    assert blob.path == (tmp_path / "weights" / "model.gguf").resolve() and blob.size == len(GGUF)


def test_from_a_model_name(tmp_path):
    plan = plan_for(tmp_path, "FROM llama3.2:3b\nSYSTEM Be brief.\n")
    assert plan.request("brief") == {"model": "brief", "from": "llama3.2:3b", "system": "Be brief."}
    assert plan.blobs() == []


@pytest.mark.parametrize("source", ["./missing.gguf", "../elsewhere/model", "/no/such/model", "~/nope", "m.gguf"])
def test_a_missing_from_path_is_an_error_naming_it(tmp_path, source):
    assert looks_like_path(source)
    with pytest.raises(CreatePlanError, match=r"does not exist") as caught:
        plan_for(tmp_path, f"FROM {source}\n")
    assert source in str(caught.value) and "model name" in str(caught.value)


def test_paths_are_expanded_from_the_modelfile_folder_and_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / "a.gguf").write_bytes(GGUF)
    monkeypatch.setenv("HOME", str(home))
    plan = plan_for(tmp_path, "FROM ~/models/a.gguf\n")
    assert plan.request("x")["files"] == {"a.gguf": digest_of(GGUF)}
    sub = tmp_path / "sub"
    sub.mkdir()
    plan = build_create_request(parse_modelfile("FROM ../home/models/a.gguf\n"), sub)
    assert plan.files[0].path == (home / "models" / "a.gguf").resolve()


def test_a_symlinked_gguf_keeps_its_own_name(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "sha256-abc").write_bytes(GGUF)
    (tmp_path / "tiny.gguf").symlink_to(blobs / "sha256-abc")
    plan = plan_for(tmp_path, "FROM tiny.gguf\n")
    assert plan.files[0].name == "tiny.gguf" and plan.files[0].path == (blobs / "sha256-abc").resolve()


def test_several_files_are_named_relative_to_their_common_folder(tmp_path):
    for part in ("a/x.gguf", "b/c/y.gguf"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / part).write_bytes(GGUF + part.encode())
    plan = plan_for(tmp_path, "FROM ./a/x.gguf\nFROM ./b/c/y.gguf\n")
    assert sorted(plan.request("x")["files"]) == ["a/x.gguf", "b/c/y.gguf"]
    assert request_file_names(["/m/one.gguf"]) == {"/m/one.gguf": "one.gguf"}


def test_a_model_folder_expands_to_the_files_ollama_imports(tmp_path):
    folder = tmp_path / "hf-model"
    (folder / "nested").mkdir(parents=True)
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (folder / name).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}" + name.encode())
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (folder / "tokenizer.json").write_text("{}")
    (folder / "nested" / "config.json").write_text("{}")
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    (folder / "tokenizer.model").write_bytes(b"\x0a\x00\x01\x02binary")
    (folder / "README.md").write_text("# not a model file")
    (folder / "original.pth").write_bytes(b"PK\x03\x04")
    found = [Path(p).relative_to(folder).as_posix() for p in files_for_model(str(folder))]
    assert found == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
        "tokenizer.json",
        "nested/config.json",
        "chat_template.jinja",
        "tokenizer.model",
    ]
    plan = plan_for(tmp_path, "FROM ./hf-model\n")
    assert sorted(plan.request("x")["files"]) == sorted(found)


def test_a_folder_without_model_files_and_a_json_that_is_binary(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CreatePlanError, match=r"No model files in"):
        plan_for(tmp_path, "FROM ./empty\n")
    folder = tmp_path / "gguf-dir"
    folder.mkdir()
    (folder / "m.gguf").write_bytes(GGUF)
    (folder / "config.json").write_bytes(b"\x00\x01binary")
    with pytest.raises(CreatePlanError, match=r"config.json is not what Ollama expects"):
        plan_for(tmp_path, "FROM ./gguf-dir\n")


def test_adapter_draft_and_their_errors(tmp_path):
    (tmp_path / "lora.gguf").write_bytes(GGUF + b"lora")
    (tmp_path / "draft.gguf").write_bytes(GGUF + b"draft")
    plan = plan_for(tmp_path, "FROM llama3.2\nADAPTER ./lora.gguf\nDRAFT ./draft.gguf\n")
    request = plan.request("x")
    assert request["adapters"] == {"lora.gguf": digest_of(GGUF + b"lora")}
    assert request["draft_files"] == {"draft.gguf": digest_of(GGUF + b"draft")}
    with pytest.raises(CreatePlanError, match=r"ADAPTER \./gone.gguf: .*gone.gguf does not exist"):
        plan_for(tmp_path, "FROM llama3.2\nADAPTER ./gone.gguf\n")
    with pytest.raises(CreatePlanError, match=r"DRAFT must not reference the same local path as FROM"):
        plan_for(tmp_path, "FROM ./draft.gguf\nDRAFT ./draft.gguf\n")


def test_parameter_and_requires_errors_and_deprecations(tmp_path):
    with pytest.raises(CreatePlanError, match=r"unknown parameter 'nonsense'"):
        plan_for(tmp_path, "FROM llama3.2\nPARAMETER nonsense 1\n")
    with pytest.raises(CreatePlanError, match=r"num_ctx"):
        plan_for(tmp_path, "FROM llama3.2\nPARAMETER num_ctx lots\n")
    with pytest.raises(CreatePlanError, match=r"requires must be a valid semver"):
        plan_for(tmp_path, "FROM llama3.2\nREQUIRES 0.x\n")
    plan = plan_for(
        tmp_path, "FROM llama3.2\nPARAMETER mirostat 2\nPARAMETER temperature 1\nPARAMETER temperature 0.5\n"
    )
    assert plan.parameters == {"temperature": 0.5}  # the last value wins, as in Ollama
    assert plan.warnings == ["warning: parameter mirostat is deprecated"]
    with pytest.raises(CreatePlanError, match="infinity"):
        plan_for(tmp_path, "FROM llama3.2\nPARAMETER temperature inf\n")


def test_plan_create_hashes_in_a_thread(tmp_path):
    (tmp_path / "m.gguf").write_bytes(GGUF)
    plan = run(plan_create(parse_modelfile("FROM ./m.gguf\n"), tmp_path))
    assert plan.files[0].digest == digest_of(GGUF)


# --- creating against the server ----------------------------------------------------------------------------------
def test_create_from_a_local_gguf_uploads_it_once(fake, tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.gguf").write_bytes(GGUF)
    plan = plan_for(tmp_path, MODELFILE)
    seen = create(fake, "mine", plan)
    digest = digest_of(GGUF)
    blob_calls = [(r.method, r.body_size) for r in fake.requests if r.path == f"/api/blobs/{digest}"]
    assert blob_calls == [("HEAD", 0), ("POST", len(GGUF))]
    post = fake.requests_to(f"/api/blobs/{digest}", "POST")[0]
    assert post.headers.get("Content-Length") == str(len(GGUF)) and "Transfer-Encoding" not in post.headers
    [sent] = fake.requests_to("/api/create")
    assert sent.json == plan.request("mine") and "modelfile" not in sent.json
    statuses = [p.status for p in seen if p.phase == "create"]
    assert statuses[0] == "parsing GGUF" and statuses[-2:] == ["writing manifest", "success"]
    assert seen[-1].done and not any(p.done for p in seen[:-1])
    uploads = [p for p in seen if p.phase == "upload"]
    assert uploads[0].completed == 0 and uploads[-1].completed == uploads[-1].total == len(GGUF)

    details = show(fake, "mine")
    assert details.system == "You are terse." and details.license == "MIT\nApache License\nVersion 2.0"
    assert details.messages == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "It is: 4"},
    ]
    assert details.requires == "0.12" and details.renderer == "qwen3-coder"
    assert 'stop                           "</s>"' in details.parameters.splitlines()

    again = create(fake, "mine-too", plan)  # Ollama has the blob now: HEAD says 200, nothing is uploaded
    assert [r.method for r in fake.requests if r.path == f"/api/blobs/{digest}"] == ["HEAD", "POST", "HEAD"]
    assert [p.status for p in again if p.phase == "upload"] == ["using existing file model.gguf"]
    assert fake.model("mine-too") is not None


def test_create_from_a_model_name_inherits_from_it(fake, tmp_path):
    plan = plan_for(tmp_path, "FROM llama3.2\nSYSTEM Be brief.\nPARAMETER top_k 10\n")
    create(fake, "brief", plan)
    assert fake.requests_to("/api/create")[0].json == {
        "model": "brief",
        "from": "llama3.2",
        "system": "Be brief.",
        "parameters": {"top_k": 10},
    }
    assert not [r for r in fake.requests if r.path.startswith("/api/blobs/")]
    model = fake.model("brief")
    assert model.system == "Be brief." and model.parameters == {"temperature": 0.7, "top_k": 10}


def test_create_from_a_model_the_server_lacks(fake, tmp_path):
    plan = plan_for(tmp_path, "FROM nosuchmodel\n")
    with pytest.raises(OllamaError, match=r"creating x: pull model manifest: file does not exist"):
        create(fake, "x", plan)
    assert fake.model("x") is None


def test_create_with_an_adapter(fake, tmp_path):
    (tmp_path / "lora.gguf").write_bytes(GGUF + b"lora")
    plan = plan_for(tmp_path, "FROM llama3.2\nADAPTER ./lora.gguf\n")
    create(fake, "tuned", plan)
    assert fake.model("tuned").adapters == {"lora.gguf": digest_of(GGUF + b"lora")}
    assert [r.method for r in fake.requests if r.path.startswith("/api/blobs/")] == ["HEAD", "POST"]


def test_a_server_without_adapter_support_says_so(fake, tmp_path):
    fake.adapters_supported = False
    (tmp_path / "lora.gguf").write_bytes(GGUF + b"lora")
    plan = plan_for(tmp_path, "FROM llama3.2\nADAPTER ./lora.gguf\n")
    with pytest.raises(OllamaError, match=r"LoRA adapters are no longer supported \(HTTP 400\)"):
        create(fake, "tuned", plan)


@pytest.mark.parametrize("die", [False, True])
def test_create_failing_mid_stream_registers_nothing(fake, tmp_path, die):
    (tmp_path / "m.gguf").write_bytes(GGUF)
    plan = plan_for(tmp_path, "FROM ./m.gguf\nSYSTEM hi\n")
    fake.fail("/api/create", error="write /root/.ollama/models/blobs: no space left on device", die=die, after=2)
    expected = "connection to Ollama .* was lost while creating x" if die else "no space left on device"
    with pytest.raises(OllamaError, match=expected):
        create(fake, "x", plan)
    assert fake.model("x") is None


def test_a_failed_create_leaves_no_half_read_stream_to_the_garbage_collector(fake, tmp_path):
    """qasync's loop installs no async-generator hooks, so a half-read httpx stream would be finalized by the
    garbage collector there ("async generator ignored GeneratorExit", an unraisable error)."""
    (tmp_path / "m.gguf").write_bytes(GGUF)
    plan = plan_for(tmp_path, "FROM ./m.gguf\n")
    fake.fail("/api/create", error="disk full", after=1)

    async def scenario():
        sys.set_asyncgen_hooks(firstiter=None, finalizer=None)  # as under qasync
        service = OllamaService(fake.host)
        try:
            with pytest.raises(OllamaError, match="disk full"):
                await create_model(service, "x", plan, lambda p: None)
        finally:
            await service.close()
        gc.collect()

    run(scenario())


def test_a_missing_from_path_sends_nothing(fake, tmp_path):
    with pytest.raises(CreatePlanError, match=r"missing.gguf does not exist"):
        create(fake, "x", plan_for(tmp_path, "FROM ./missing.gguf\n"))
    assert fake.requests == []


def test_create_when_ollama_is_not_running(tmp_path):
    (tmp_path / "m.gguf").write_bytes(GGUF)
    plan = plan_for(tmp_path, "FROM ./m.gguf\n")

    async def scenario():
        service = OllamaService(FakeOllama.unused_host())
        try:
            await create_model(service, "x", plan, lambda p: None)
        finally:
            await service.close()

    with pytest.raises(OllamaError, match=r"Ollama is not running at"):
        run(scenario())


# --- the fake server's create and blob rules match Ollama's ------------------------------------------------------
def raw_client(fake):
    return httpx.Client(base_url=fake.host, trust_env=False)


def test_the_removed_modelfile_field_is_ignored(fake):
    with raw_client(fake) as http:
        response = http.post("/api/create", json={"model": "x", "modelfile": "FROM llama3.2"})
    assert response.status_code == 400
    assert response.json() == {"error": "neither 'from' or 'files' was specified"}


def test_blob_rules_and_the_official_clients_chunked_upload(fake, tmp_path):
    wrong = "sha256:" + "0" * 64
    with raw_client(fake) as http:
        response = http.post(f"/api/blobs/{wrong}", content=GGUF)
        assert response.status_code == 400 and "digest mismatch" in response.json()["error"]
        assert http.head(f"/api/blobs/{wrong}").status_code == 404
        missing = {"model": "x", "files": {"m.gguf": digest_of(GGUF)}}
        response = http.post("/api/create", json=missing)
        assert response.status_code == 400 and response.json()["error"].startswith("blob not found for m.gguf")
        response = http.post("/api/create", json={"model": "x", "files": {"../m.gguf": digest_of(GGUF)}})
        assert response.json() == {"error": "file path must be relative: ../m.gguf"}

    (tmp_path / "m.gguf").write_bytes(GGUF)

    async def upload():
        client = ollama.AsyncClient(fake.host, trust_env=False)
        try:
            return await client.create_blob(tmp_path / "m.gguf")
        finally:
            await client.close()

    assert run(upload()) == digest_of(GGUF)
    assert fake.requests[-1].headers.get("Transfer-Encoding") == "chunked"
    with raw_client(fake) as http:
        assert http.head(f"/api/blobs/{digest_of(GGUF)}").status_code == 200
