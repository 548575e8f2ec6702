"""A module set by its repository id: ``openbmb/MiniCPM-o-4_5-gguf`` (or ``REPO:QUANT``) fetched
from the Hugging Face Hub, a mirror of it, or ModelScope (docs/model-files.md#from-a-hub).

Only one set's files are fetched: the LLM in one quantization and the audio, vision, TTS,
projector and Token2Wav files. They are checked against the repository's listing (a layout that
differs from the published one is refused before anything downloads), each fresh download
against the size and SHA-256 the hub lists, and the whole set by :func:`validate` before it is
handed to a loader; a damaged copy is named and never loaded. With no network (``HF_HUB_OFFLINE=1``,
``local_files_only``, or a hub that cannot be reached) the cached set is used as it is.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ..env import hub_choice, hub_environment
from ..errors import HubError, InvalidArgumentError, ModelFileError
from . import spec as ms
from .hub_clients import HuggingFaceClient, RemoteFile, Unreachable, files_under, forget, sha256_of

log = logging.getLogger(__name__)

DEFAULT_REPO = "openbmb/MiniCPM-o-4_5-gguf"
# owner/name as the hubs spell them, with an optional :QUANT tail (llama.cpp's -hf form)
_REF = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?::(?P<quant>[A-Za-z0-9_]+))?$")
_LLM = re.compile(r"^MiniCPM-o-4_5-(?P<quant>[A-Za-z0-9_]+)\.gguf$")  # at the repository's root
# The LLM quantization taken when none is named, the first the repository publishes. CANN's matmul
# refuses K-quants and gains nothing from Q8_0 (docs/ascend.md#data-types); elsewhere Q4_K_M, as
# llama.cpp-omni's own default: the smallest download and the fastest memory-bound decode.
DEFAULT_QUANTS = {"cann": ("F16",), "other": ("Q4_K_M", "Q8_0", "F16")}


@dataclass(frozen=True)
class ModelRef:
    """A repository id and the LLM quantization it names (None: the device's default)."""

    repo: str
    quant: str | None = None


def parse_ref(model) -> ModelRef | None:
    """The repository ``model`` names, or None when it is a path: an existing file or directory,
    or anything not shaped ``owner/name[:QUANT]``."""
    if model is None or isinstance(model, Path) or Path(str(model)).expanduser().exists():
        return None
    m = _REF.match(str(model))
    return ModelRef(m["repo"], m["quant"].upper() if m["quant"] else None) if m else None


def llm_file(quant: str) -> str:
    return f"MiniCPM-o-4_5-{quant}.gguf"


def module_files() -> list[str]:
    """The repository paths of every module's files but the LLM's (one name each)."""
    return [f.relpath for f in ms.FILES if f.key != "llm"]


def set_files(quant: str) -> list[str]:
    """The repository paths of one module set: the LLM first, then every other module's files."""
    return [llm_file(quant), *module_files()]


def published_quants(names) -> list[str]:
    """The LLM quantizations among a repository's file names, sorted."""
    return sorted(m["quant"] for m in map(_LLM.match, names) if m)


def choose_quant(
    repo: str, asked: str | None, published: list[str], device: str, source: str = "the repository publishes"
) -> str:
    """The quantization to fetch: the one asked for, which must be in ``published``, else the
    first of the device's defaults that is; HubError listing ``published`` otherwise (``source``
    says where the list comes from)."""
    offered = ", ".join(published) or "none"
    if asked is not None:
        found = {q.upper(): q for q in published}.get(asked.upper())
        if found is None:
            raise HubError(repo, f"no LLM quantization {asked!r}: {source} {offered}")
        return found
    defaults = DEFAULT_QUANTS["cann" if device.split(":")[0] == "cann" else "other"]
    for q in defaults:
        if q in published:
            return q
    raise HubError(repo, f"no LLM in {' or '.join(defaults)} (the defaults on {device}): {source} {offered}; name one")


def _client(hub: str | None, local_dir, revision: str | None):
    name = hub_choice(hub)
    env = hub_environment(name)
    local = Path(local_dir).expanduser() if local_dir is not None else None
    if name == "modelscope":
        from .modelscope_client import ModelScopeClient

        return ModelScopeClient(env, local, revision)
    return HuggingFaceClient(env, local, revision)


def _listing(client, repo: str, offline: bool) -> tuple[dict[str, RemoteFile], bool]:
    """The repository's files (asked of the hub), or with no network what the cache holds; and
    whether the hub answered."""
    if not offline:
        try:
            return client.listing(repo), True
        except Unreachable as exc:
            log.warning("%s: %s; using the cached copy", repo, exc)
            reason = str(exc)
    else:
        reason = "offline mode (HF_HUB_OFFLINE or local_files_only)"
    root = client.cached_root(repo, module_files())
    if root is None:
        raise HubError(repo, f"not in the cache, and the hub cannot be asked: {reason}")
    return files_under(root), False


def _check_copy(path: Path, remote: RemoteFile, fresh: bool) -> None:
    """A copy whose size differs from the listing's is refused by name, and so is a fresh one
    whose SHA-256 does; either is removed (it is not the published file), so the next run fetches
    it again."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        problem = f"{size} bytes, the hub lists {remote.size}"
    elif fresh and remote.sha256 and sha256_of(path) != remote.sha256:
        problem = "its SHA-256 differs from the hub's"
    else:
        return
    forget(path)
    raise ModelFileError(f"{problem}: a damaged copy, removed and not loaded; run again to fetch it", str(path))


def _validated(repo: str, paths: dict[str, Path], listing: dict[str, RemoteFile], device: str) -> None:
    """validate() over the fetched set; a file it refuses is told apart: a damaged copy (its digest
    differs from the hub's: removed) or the published file itself."""
    from .layout import discover, validate

    llm = next(iter(paths.values()))
    try:
        validate(discover(llm), device=device)
    except ModelFileError as exc:
        name = next((n for n, p in paths.items() if str(p) == exc.path), None)
        remote = listing.get(name) if name else None
        if remote is None or not remote.sha256:
            hint = "not loaded; if the copy is damaged, delete it (in a hub's cache, also the blob it links to)"
            raise ModelFileError(f"{exc.problem}; {hint}", exc.path) from exc
        if sha256_of(paths[name]) != remote.sha256:
            forget(paths[name])
            raise ModelFileError(
                f"{exc.problem}: a damaged copy (its SHA-256 differs from the hub's), removed; run again to fetch it",
                exc.path,
            ) from exc
        raise ModelFileError(f"{exc.problem}; this is the file {repo} publishes", exc.path) from exc


def download(
    model: str,
    llm_quant: str | None = None,
    device: str = "cpu",
    hub: str | None = None,
    local_dir=None,
    revision: str | None = None,
    local_files_only: bool = False,
) -> Path:
    """Fetches (or finds in the cache) one module set of repository ``model`` (``REPO`` or
    ``REPO:QUANT``) and validates it for ``device``; returns the path of its LLM file, which every
    loader takes as the set (its directory may hold other quantizations).

    llm_quant: the LLM quantization (default: the device's, DEFAULT_QUANTS); hub: "huggingface" or
    "modelscope" (default OMNI_HUB, else the Hugging Face Hub); local_dir: a directory to put the
    files in instead of the hub's cache; local_files_only: never use the network."""
    ref = parse_ref(model)
    if ref is None:
        raise InvalidArgumentError(f"{model!r} is not a repository id (owner/name, optionally :QUANT)")
    if ref.quant and llm_quant and ref.quant.upper() != llm_quant.upper():
        raise InvalidArgumentError(f"{model!r} names quantization {ref.quant}, llm_quant {llm_quant!r}: give one")
    client = _client(hub, local_dir, revision)
    offline = local_files_only or client.env.offline
    listing, online = _listing(client, ref.repo, offline)
    source = "the repository publishes" if online else "the cache holds"
    quant = choose_quant(ref.repo, ref.quant or llm_quant, published_quants(listing), device, source)
    names = set_files(quant)
    missing = [n for n in names if n not in listing]
    if missing:
        problem = "lacks" if online else "has no cached copy of"
        raise HubError(ref.repo, f"{problem} {', '.join(missing)} (the published layout: docs/model-files.md)")
    fresh = {n for n in names if online and not client.is_cached(ref.repo, n)}
    paths = client.fetch(ref.repo, names, not online)
    for name in names if online else ():
        _check_copy(paths[name], listing[name], name in fresh)
    _validated(ref.repo, paths, listing if online else {}, device)
    log.info("%s (%s): %s", ref.repo, quant, paths[names[0]])
    return paths[names[0]]


def resolve(model, device: str = "cpu", **options) -> Path:
    """``model`` as a loader takes it: a path stays as it is, a repository id is fetched (options
    as for :func:`download`)."""
    if parse_ref(model) is None:
        return Path(model)
    return download(str(model), device=device, **options)
