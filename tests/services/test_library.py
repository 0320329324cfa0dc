"""The model library over real generated GGUFs, a fake HF cache and Ollama store laid out like the real ones."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.services.library import index as library_module
from app.services.library.cache import CACHE_VERSION
from app.services.library.index import LibraryError, LibraryRoots, ModelLibrary
from tests.support.gguf_factory import write_tiny_gguf


def tiny_parameter_count(path: Path) -> int:
    from app.core.gguf.header import read_gguf_header

    total = 0
    for tensor in read_gguf_header(path).tensors:
        total += int(np.prod(tensor.shape))
    return total


def write_hf_folder(folder: Path, *, hidden: int = 32, layers: int = 2) -> int:
    """A small HF-format model folder (config.json + safetensors); returns its parameter count."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "max_position_embeddings": 4096,
        "torch_dtype": "float16",
    }
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {"embed.weight": np.zeros((100, hidden), dtype=np.float16)}
    for i in range(layers):
        tensors[f"layers.{i}.weight"] = np.zeros((hidden, hidden), dtype=np.float16)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return sum(int(t.size) for t in tensors.values())


def add_hf_cache_file(hub: Path, repo_id: str, relative: str, source: Path, revisions: tuple[str, ...]) -> Path:
    """Put ``source`` into an HF cache like huggingface_hub does: one blob, a symlink per snapshot."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    data = source.read_bytes()
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revisions[0])
    link = None
    for revision in revisions:
        link = repo / "snapshots" / revision / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    assert link is not None
    return repo / "snapshots" / revisions[0] / relative


def add_ollama_model(store: Path, name: str, tag: str, source: Path | None, manifest: str | None = None) -> Path:
    digest = hashlib.sha256(source.read_bytes()).hexdigest() if source else "0" * 64
    if source is not None:
        (store / "blobs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, store / "blobs" / f"sha256-{digest}")
    path = store / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    if manifest is None:
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "layers": [
                    {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 3},
                    {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 9},
                ],
            }
        )
    path.write_text(manifest)
    return path


@pytest.fixture
def layout(tmp_path, tiny_gguf, truncated_gguf, not_a_gguf):
    models = tmp_path / "models"
    (models / "sub").mkdir(parents=True)
    shutil.copyfile(tiny_gguf, models / "tiny.gguf")
    write_tiny_gguf(models / "sub" / "long.gguf", context_length=8192, name="long-one")
    shutil.copyfile(truncated_gguf, models / "truncated.gguf")
    shutil.copyfile(not_a_gguf, models / "text.gguf")
    hf_params = write_hf_folder(models / "my-hf-model")
    hub = tmp_path / "hub"
    hf_link = add_hf_cache_file(hub, "org/tiny-GGUF", "tiny-f16.gguf", tiny_gguf, ("bbbb", "aaaa"))
    write_hf_folder(tmp_path / "hf-src")
    for name in ("config.json", "model.safetensors"):
        add_hf_cache_file(hub, "org/tiny-hf", name, tmp_path / "hf-src" / name, ("cccc",))
    ollama = tmp_path / "ollama"
    add_ollama_model(ollama, "tiny", "latest", tiny_gguf)
    add_ollama_model(ollama, "broken", "latest", None, manifest="{not json")
    add_ollama_model(ollama, "nolayer", "7b", None, manifest=json.dumps({"layers": []}))
    add_ollama_model(ollama, "gone", "latest", None)  # the blob it names is missing
    roots = LibraryRoots((models,), hub, ollama)
    return {"roots": roots, "models": models, "hub": hub, "ollama": ollama, "hf_link": hf_link, "hf_params": hf_params}


def _by_name(scan):
    """Entries by name; where two share a name (a folder's GGUF and the HF cache's copy), the first found."""
    return {e.name: e for e in reversed(scan.entries)}


def test_scan_lists_folders_hf_cache_and_ollama(layout, tiny_gguf, tmp_path):
    scan = ModelLibrary(layout["roots"], tmp_path / "cache.json").scan()
    entries = _by_name(scan)
    tiny = entries["tiny-test-model"]
    assert (tiny.kind, tiny.source, tiny.backend) == ("gguf", "folder", "llama.cpp")
    assert (tiny.architecture, tiny.quantization, tiny.context_length) == ("llama", "F16", 2048)
    assert tiny.parameter_count == tiny_parameter_count(tiny_gguf)
    assert tiny.size_bytes == tiny_gguf.stat().st_size
    assert entries["long-one"].context_length == 8192
    # the HF cache: the model's own name and the repo, one entry although two snapshots link the blob
    cached = [e for e in scan.entries if e.source == "hf-cache" and e.kind == "gguf"]
    assert [(e.name, e.repo_id, e.file_name) for e in cached] == [("tiny-test-model", "org/tiny-GGUF", "tiny-f16.gguf")]
    assert "/snapshots/bbbb/" in cached[0].path  # the snapshot refs/main points at
    # HF-format folders, in the model folder and in the cache: vLLM, parameters from the safetensors header
    hf = entries["my-hf-model"]
    assert (hf.kind, hf.backend, hf.architecture) == ("hf", "vLLM", "LlamaForCausalLM")
    assert (hf.parameter_count, hf.context_length, hf.quantization) == (layout["hf_params"], 4096, "float16")
    assert entries["org/tiny-hf"].source == "hf-cache" and entries["org/tiny-hf"].kind == "hf"
    # Ollama: name:tag, the blob is the GGUF
    ollama = entries["tiny:latest"]
    assert (ollama.source, ollama.architecture, ollama.error) == ("ollama", "llama", None)
    assert Path(ollama.path).name.startswith("sha256-")
    assert scan.problems == []


def test_broken_files_and_manifests_are_listed_with_their_error(layout, tmp_path):
    entries = _by_name(ModelLibrary(layout["roots"]).scan())
    assert "truncated" in entries["truncated.gguf"].error and "download it again" in entries["truncated.gguf"].error
    assert "not a GGUF" in entries["text.gguf"].error
    assert "unreadable" in entries["broken:latest"].error and "ollama pull" in entries["broken:latest"].error
    assert "no model layer" in entries["nolayer:7b"].error
    assert "missing" in entries["gone:latest"].error
    assert entries["tiny-test-model"].error is None


def test_cached_rescan_opens_no_model_file(layout, tmp_path, monkeypatch):
    cache_file = tmp_path / "cache.json"
    first = ModelLibrary(layout["roots"], cache_file).scan()
    assert first.headers_read >= 8
    opened: list[str] = []
    real_open, real_os_open = io.open, os.open

    def recording_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def recording_os_open(file, *args, **kwargs):  # bounded reads (app.core.user_files) open this way
        opened.append(str(file))
        return real_os_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", recording_open)
    monkeypatch.setattr(os, "open", recording_os_open)
    second = ModelLibrary(layout["roots"], cache_file).scan()  # a new instance: the cache came from disk
    monkeypatch.undo()
    assert second.headers_read == 0 and second.cache_hits == first.headers_read
    assert [p for p in opened if p.endswith((".gguf", ".safetensors")) or "sha256-" in p] == []
    assert str(cache_file) in opened, "the recorder saw nothing: the cache file itself must have been opened"
    assert sorted(e.to_dict().items() for e in second.entries) == sorted(e.to_dict().items() for e in first.entries)


def test_changed_file_is_read_again_and_a_damaged_cache_is_rebuilt(layout, tmp_path):
    cache_file = tmp_path / "cache.json"
    library = ModelLibrary(layout["roots"], cache_file)
    library.scan()
    write_tiny_gguf(layout["models"] / "tiny.gguf", context_length=1024, name="tiny-test-model")
    scan = library.scan()
    assert scan.headers_read == 1
    assert _by_name(scan)["tiny-test-model"].context_length == 1024
    cache_file.write_text("{damaged")
    rebuilt = ModelLibrary(layout["roots"], cache_file).scan()
    assert _by_name(rebuilt)["tiny-test-model"].context_length == 1024
    assert json.loads(cache_file.read_text())["version"] == CACHE_VERSION


NESTED = ("[" * 100_000, '{"a":' * 100_000)


@pytest.mark.parametrize(
    "content",
    [
        *(n.encode() for n in NESTED),
        b'{"version": 1, "files": ' + b"[" * 100_000,
        b"{" + b" " * (1024 * 1024) + b"}",  # over the bound, lowered to 1 MiB below
        b'{"version": 1, "files": "\xff"}',
    ],
    ids=["nested-list", "nested-object", "nested-inside", "over-the-bound", "not-utf8"],
)
def test_nested_or_oversized_cache_is_rebuilt(layout, tmp_path, caplog, content, monkeypatch):
    monkeypatch.setattr("app.services.library.cache.CACHE_MAX_BYTES", 1024 * 1024)
    cache_file = tmp_path / "cache.json"
    cache_file.write_bytes(content)
    scan = ModelLibrary(layout["roots"], cache_file).scan()
    assert _by_name(scan)["tiny-test-model"].error is None and scan.headers_read >= 8
    assert "it will be rebuilt" in caplog.text
    assert json.loads(cache_file.read_text())["version"] == CACHE_VERSION  # written anew from this scan


@pytest.mark.parametrize(
    ("config", "reason"),
    [(NESTED[0], "nested too deeply"), (NESTED[1], "nested too deeply"), ("[1]", "not a JSON object")],
)
def test_model_folder_with_a_broken_config_is_listed_with_its_error(layout, config, reason):
    from app.services.library.details import entry_details

    (layout["models"] / "my-hf-model" / "config.json").write_text(config)
    scan = ModelLibrary(layout["roots"]).scan()
    entries = _by_name(scan)
    broken = entries["my-hf-model"]
    assert broken.kind == "hf" and reason in broken.error and "config.json" in broken.error
    assert "Download the model again" in broken.error
    assert entries["tiny-test-model"].error is None and entries["org/tiny-hf"].error is None  # the rest still lists
    details = entry_details(broken)  # the Models panel's details: an error, not an exception
    assert "config.json" in (details.error or "") and "Download the model again" in (details.error or "")
    assert details.metadata == []


def test_oversized_config_json_is_refused_with_its_error(layout):
    config = layout["models"] / "my-hf-model" / "config.json"
    config.write_text('{"model_type": "llama", "pad": "' + "x" * (16 * 1024 * 1024) + '"}')
    broken = _by_name(ModelLibrary(layout["roots"]).scan())["my-hf-model"]
    assert "larger than 16 MiB" in broken.error


def _write_safetensors_header(path: Path, header: bytes) -> None:
    path.write_bytes(len(header).to_bytes(8, "little") + header)


def test_safetensors_with_a_nested_header_is_listed_with_its_error(layout):
    _write_safetensors_header(layout["models"] / "my-hf-model" / "model.safetensors", b"[" * 100_000)
    entries = _by_name(ModelLibrary(layout["roots"]).scan())
    error = entries["my-hf-model"].error or ""
    assert "model.safetensors has a damaged header" in error and "nested too deeply" in error
    assert entries["tiny-test-model"].error is None


def test_safetensors_header_above_16_mib_is_read_as_the_format_allows(tmp_path):
    from app.services.library.files import MAX_SAFETENSORS_HEADER_BYTES, safetensors_parameter_count

    header = {"__metadata__": {"note": "x" * (17 * 1024 * 1024)}, "w": {"dtype": "F16", "shape": [3, 5]}}
    path = tmp_path / "big-header.safetensors"
    _write_safetensors_header(path, json.dumps(header).encode())
    assert safetensors_parameter_count(path) == 15  # the safetensors library accepts headers up to 100 MB
    path.write_bytes((MAX_SAFETENSORS_HEADER_BYTES + 1).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="implausible header size"):
        safetensors_parameter_count(path)


def test_safetensors_shape_of_the_wrong_type_is_a_damaged_header(tmp_path):
    from app.services.library.files import safetensors_parameter_count

    path = tmp_path / "odd.safetensors"
    _write_safetensors_header(path, json.dumps({"w": {"dtype": "F16", "shape": 7}}).encode())
    with pytest.raises(ValueError, match=r"odd\.safetensors has a damaged header"):
        safetensors_parameter_count(path)


def test_unreadable_folder_is_reported_and_the_rest_indexed(layout, monkeypatch):
    locked = layout["models"] / "sub"
    locked.chmod(0)
    try:
        if os.geteuid() == 0:  # root reads through chmod 000: make scandir fail as it does for a normal user
            real_scandir = os.scandir

            def scandir(path):
                if Path(path) == locked:
                    raise PermissionError(13, "Permission denied", str(path))
                return real_scandir(path)

            monkeypatch.setattr(os, "scandir", scandir)
        scan = ModelLibrary(layout["roots"]).scan()
    finally:
        locked.chmod(0o755)
    names = _by_name(scan)
    assert "long-one" not in names and "tiny-test-model" in names
    assert scan.problems == [f"Cannot read {locked}: permission denied. Check its permissions or remove it."]


def test_symlink_loops_end_and_each_file_is_listed_once(layout):
    models = layout["models"]
    (models / "sub" / "loop").symlink_to(models, target_is_directory=True)
    (models / "self").symlink_to("self")  # a link to itself
    (models / "again.gguf").symlink_to(models / "tiny.gguf")
    scan = ModelLibrary(LibraryRoots((models,))).scan()
    names = [e.name for e in scan.entries]
    assert names.count("tiny-test-model") == 1 and names.count("long-one") == 1


def test_file_that_vanishes_during_the_scan_is_dropped(layout, monkeypatch):
    real = library_module.gguf_summary

    def vanishing(path):
        if path.name == "tiny.gguf":
            path.unlink()
        return real(path)

    monkeypatch.setattr(library_module, "gguf_summary", vanishing)
    names = _by_name(ModelLibrary(LibraryRoots((layout["models"],))).scan())
    assert "tiny-test-model" not in names and "long-one" in names


def test_file_that_changes_during_the_scan_is_read_again(layout, monkeypatch):
    real = library_module.gguf_summary
    calls: list[str] = []

    def changing(path):
        calls.append(path.name)
        if path.name == "tiny.gguf" and calls.count("tiny.gguf") == 1:
            result = real(path)
            write_tiny_gguf(path, context_length=512, name="tiny-test-model")  # a download finishing under us
            os.utime(path, ns=(1, 1))
            return result
        return real(path)

    monkeypatch.setattr(library_module, "gguf_summary", changing)
    entry = _by_name(ModelLibrary(LibraryRoots((layout["models"],))).scan())["tiny-test-model"]
    assert calls.count("tiny.gguf") == 2 and entry.context_length == 512


def test_delete_inside_the_library(layout):
    library = ModelLibrary(layout["roots"])
    target = layout["models"] / "tiny.gguf"
    assert library.delete(target) == [target]
    assert not target.exists()


def test_delete_hf_snapshot_link_takes_the_blob(layout):
    link = layout["hf_link"]
    blob = link.resolve()
    other = link.parent.parent / "aaaa" / link.name
    removed = ModelLibrary(layout["roots"]).delete(link)
    assert not os.path.lexists(link) and not blob.exists() and not os.path.lexists(other)
    assert blob in removed
    assert all(e.repo_id != "org/tiny-GGUF" for e in ModelLibrary(layout["roots"]).scan().entries)


def test_delete_refuses_outside_the_roots_and_ollama(layout, tmp_path):
    library = ModelLibrary(layout["roots"])
    outside = tmp_path / "elsewhere.gguf"
    outside.write_text("x")
    with pytest.raises(LibraryError, match="not inside the library's folders"):
        library.delete(outside)
    with pytest.raises(LibraryError, match="not inside"):
        library.delete(layout["models"] / ".." / "elsewhere.gguf")  # a path that only looks inside
    escape = layout["models"] / "escape"
    escape.symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(LibraryError, match="not inside"):
        library.delete(escape / "elsewhere.gguf")  # a folder link out of the root
    with pytest.raises(LibraryError, match="not inside"):
        library.delete(layout["models"])  # the root itself
    assert outside.exists() and layout["models"].is_dir()
    blob = _by_name(library.scan())["tiny:latest"].path
    with pytest.raises(LibraryError, match="ollama rm"):
        library.delete(blob)
    assert Path(blob).exists()
    with pytest.raises(LibraryError, match="no longer exists"):
        library.delete(layout["models"] / "never-was.gguf")


def test_link_inside_a_root_is_removed_but_not_its_target(layout, tmp_path):
    outside = tmp_path / "keep.gguf"
    shutil.copyfile(layout["models"] / "tiny.gguf", outside)
    link = layout["models"] / "linked.gguf"
    link.symlink_to(outside)
    ModelLibrary(layout["roots"]).delete(link)
    assert not os.path.lexists(link) and outside.exists()


def test_entry_dict_has_the_cli_fields(layout):
    entry = _by_name(ModelLibrary(layout["roots"]).scan())["tiny-test-model"]
    data = entry.to_dict()
    for key in ("path", "name", "kind", "source", "architecture", "parameter_count", "quantization"):
        assert key in data
    assert (data["size_bytes"], data["backend"], data["error"]) == (entry.size_bytes, "llama.cpp", None)
    assert data["context_length"] == 2048


def test_missing_configured_folder_is_reported_but_app_folders_are_optional(tmp_path, monkeypatch):
    from app.core.settings import Settings
    from app.services.paths import app_paths

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    gone = tmp_path / "unplugged-disk"
    settings = Settings(model_folders=[str(gone)], download_dir=str(tmp_path / "downloads"))
    roots = LibraryRoots.from_settings(settings, app_paths())
    assert roots.folders[0] == gone and len(roots.folders) == 3  # configured, download folder, app models folder
    scan = ModelLibrary(roots).scan()
    assert scan.entries == []
    assert scan.problems == [f"The model folder {gone} does not exist. Fix or remove it in Settings."]


def test_split_gguf_is_one_entry_and_missing_parts_are_named(tmp_path, tiny_gguf):
    import gguf

    folder = tmp_path / "split"
    folder.mkdir()
    first = folder / "big-Q8_0-00001-of-00003.gguf"
    writer = gguf.GGUFWriter(str(first), "llama")  # the first shard carries the metadata (as gguf-split writes)
    writer.add_name("big-model")
    writer.add_uint16("split.no", 0)
    writer.add_uint16("split.count", 3)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    shutil.copyfile(tiny_gguf, folder / "big-Q8_0-00002-of-00003.gguf")
    library = ModelLibrary(LibraryRoots((folder,)))
    [entry] = library.scan().entries
    assert (entry.name, entry.parameter_count, entry.architecture) == ("big-model", None, "llama"), entry.error
    assert entry.error == "1 of 3 parts are missing (big-Q8_0-00003-of-00003.gguf). Download them too."
    shutil.copyfile(tiny_gguf, folder / "big-Q8_0-00003-of-00003.gguf")
    [entry] = library.scan().entries
    assert entry.error is None
    assert entry.size_bytes == sum(p.stat().st_size for p in folder.iterdir())


def test_deleting_the_first_shard_removes_every_shard_and_their_blobs(tmp_path):
    models, hub = tmp_path / "models", tmp_path / "hub"
    models.mkdir()
    names = [f"big-Q8_0-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    for seed, name in enumerate(names):
        write_tiny_gguf(models / name, seed=seed)  # distinct bytes: distinct HF blobs
    write_tiny_gguf(models / "big-Q4_0-00001-of-00002.gguf", seed=9)  # another split set in the same folder
    links = [add_hf_cache_file(hub, "org/big-GGUF", name, models / name, ("main1",)) for name in names[:2]]
    blobs = [link.resolve() for link in links]
    library = ModelLibrary(LibraryRoots((models,), hub))
    [entry] = [e for e in library.scan().entries if e.path == str(models / names[0])]
    assert entry.size_bytes == sum((models / n).stat().st_size for n in names)

    removed = library.delete(entry.path)
    assert removed == [models / n for n in names]
    assert sorted(p.name for p in models.iterdir()) == ["big-Q4_0-00001-of-00002.gguf"]

    [hf_entry] = [e for e in library.scan().entries if e.repo_id == "org/big-GGUF"]
    assert "1 of 3 parts are missing" in (hf_entry.error or "")  # shard 3 never reached the cache
    removed = library.delete(hf_entry.path)
    assert set(links) <= set(removed) and set(blobs) <= set(removed)
    assert not any(os.path.lexists(p) for p in [*links, *blobs])
    assert [e.repo_id for e in library.scan().entries if e.repo_id] == []


def test_deleting_a_later_shard_removes_only_that_file(tmp_path, tiny_gguf):
    names = [f"m-{i:05d}-of-00002.gguf" for i in (1, 2)]
    for name in names:
        shutil.copyfile(tiny_gguf, tmp_path / name)
    assert ModelLibrary(LibraryRoots((tmp_path,))).delete(tmp_path / names[1]) == [tmp_path / names[1]]
    assert (tmp_path / names[0]).exists()


@pytest.mark.parametrize(
    ("general_name", "path", "shown"),
    [
        ("Gemma 3 270m", "/m/gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M"),  # a size label's unit in capitals
        ("Qwen2.5 7B Instruct", "/m/x.gguf", "Qwen2.5 7B Instruct"),
        ("  Llama   3.2 1b  ", "/m/x.gguf", "Llama 3.2 1B"),
        ("Phi-4 mini 3.8b instruct", "/m/x.gguf", "Phi-4 mini 3.8B instruct"),
        ("gemma-3n-e2b", "/m/x.gguf", "gemma-3n-e2b"),  # "e2b" is a name, not a size
        (None, "/m/gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m"),  # no name: the file's stem, as it is
        ("", "/m/big-Q8_0-00001-of-00003.gguf", "big-Q8_0"),  # a split file without its part number
        (42, "/m/odd.GGUF", "odd"),
    ],
)
def test_one_display_name_rule(general_name, path, shown):
    from app.services.library.names import model_display_name

    assert model_display_name(general_name, path) == shown


def test_entries_carry_the_header_name_family_and_licence(tmp_path, tiny_gguf):
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_gguf(folder / "gemma-3-270m-q4_k_m.gguf", name="Gemma 3 270m")
    write_tiny_gguf(folder / "anonymous-q8_0.gguf", name="")
    scan = ModelLibrary(LibraryRoots((folder,), None, None)).scan()
    by_file = {e.file_name: e for e in scan.entries}
    assert by_file["gemma-3-270m-q4_k_m.gguf"].name == "Gemma 3 270M"
    assert by_file["anonymous-q8_0.gguf"].name == "anonymous-q8_0"
    assert by_file["anonymous-q8_0.gguf"].family == "llama"  # no basename: the architecture
