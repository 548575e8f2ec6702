"""The hub clients behind :mod:`~llama_omni_py.modelset.hub`: each lists a repository's files
(with sizes and, for large files, SHA-256 digests), finds what its cache already holds, and
fetches one file into the cache or a directory of the user's choice. The Hugging Face Hub goes
through ``huggingface_hub`` (its cache, resumable downloads, a progress bar per file); ModelScope
through ``modelscope`` (the ``modelscope`` extra). Both are imported only when a model is fetched.
Both lock each file while they fetch it (a file lock in their cache), check again once they hold
the lock, and move a download into place only when it is whole: processes that fetch the same set
at once download each file once, so no lock of ours is taken around them.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from ..env import HubEnvironment
from ..errors import HubError, InvalidArgumentError, ModelFileError

log = logging.getLogger(__name__)

HASH_BLOCK = 8 << 20


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository listing: its size and SHA-256 when the hub gives them."""

    path: str
    size: int | None = None
    sha256: str | None = None


class Unreachable(Exception):
    """The hub cannot be asked (offline mode, no route, a server error): the cache must do."""


def network_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the network or the hub's server failed, rather than the request."""
    if isinstance(exc, (ConnectionError, TimeoutError)):  # huggingface_hub's OfflineModeIsEnabled too
        return True
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int) and status >= 500:
        return True
    return type(exc).__module__.startswith(("requests", "httpx", "httpcore", "urllib3"))  # httpx2 too


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def files_under(root: Path) -> dict[str, RemoteFile]:
    """What a directory holds, as a listing without sizes (the cache's view when offline)."""
    return {
        p.relative_to(root).as_posix(): RemoteFile(p.relative_to(root).as_posix())
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).parts[0].startswith(".")
    }


def forget(path: Path) -> None:
    """Removes a damaged copy: the file, and when it is a link into a hub cache, the blob it names
    (or the hub would link the same bytes again)."""
    target = path.resolve()
    path.unlink(missing_ok=True)
    if target != path.absolute():
        target.unlink(missing_ok=True)


def incomplete(repo: str, name: str, exc: BaseException) -> ModelFileError:
    return ModelFileError(
        f"download incomplete ({type(exc).__name__}: {str(exc).splitlines()[0]}); run again to resume it",
        f"{repo}/{name}",
    )


def import_client(module: str, install: str):
    """The hub client package, or a clear error saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise InvalidArgumentError(f"fetching a model by repository id needs '{module}': {install}") from e


class HuggingFaceClient:
    """The Hugging Face Hub or a mirror of it (``HF_ENDPOINT``), through ``huggingface_hub``."""

    name = "the Hugging Face Hub"

    def __init__(self, env: HubEnvironment, local_dir: Path | None, revision: str | None):
        self.hf = import_client("huggingface_hub", "pip install huggingface_hub")
        self.errors = import_client("huggingface_hub.utils", "pip install huggingface_hub")  # every version's
        self.env, self.local_dir, self.revision = env, local_dir, revision or "main"
        self.where = env.endpoint or "https://huggingface.co"

    def _hub_error(self, repo: str, exc: BaseException) -> Exception:
        """The HubError (or Unreachable) for an error of huggingface_hub."""
        errors = self.errors
        if isinstance(exc, errors.GatedRepoError):
            return HubError(repo, f"access to this gated repository on {self.where} needs a token (HF_TOKEN)")
        if isinstance(exc, errors.RepositoryNotFoundError):
            return HubError(
                repo, f"no such directory, nor model repository on {self.where} (a private one needs HF_TOKEN)"
            )
        if isinstance(exc, errors.RevisionNotFoundError):
            return HubError(repo, f"no revision {self.revision!r} on {self.where}")
        if network_failure(exc):
            return Unreachable(f"{self.where} cannot be reached ({type(exc).__name__})")
        return HubError(repo, f"{self.where} refused the request: {str(exc).splitlines()[0]}")

    def listing(self, repo: str) -> dict[str, RemoteFile]:
        """Every file of the repository at the revision, with sizes and LFS digests."""
        api = self.hf.HfApi(endpoint=self.env.endpoint)
        try:
            info = api.model_info(repo, revision=self.revision, files_metadata=True)
        except Exception as exc:
            raise self._hub_error(repo, exc) from exc
        return {
            s.rfilename: RemoteFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs is not None else None)
            for s in info.siblings or ()
        }

    def cached_root(self, repo: str, names: list[str]) -> Path | None:
        """The directory the cache (or ``local_dir``) holds the revision's files in, found from
        whichever of ``names`` is there; None when none is."""
        if self.local_dir is not None:
            return self.local_dir if self.local_dir.is_dir() else None
        for name in names:
            found = self.hf.try_to_load_from_cache(repo, name, cache_dir=self.env.cache, revision=self.revision)
            if isinstance(found, str):
                return Path(found).parents[len(Path(name).parts) - 1]
        return None

    def is_cached(self, repo: str, name: str) -> bool:
        if self.local_dir is not None:
            return (self.local_dir / name).is_file()
        found = self.hf.try_to_load_from_cache(repo, name, cache_dir=self.env.cache, revision=self.revision)
        return isinstance(found, str)

    def fetch(self, repo: str, names: list[str], offline: bool) -> dict[str, Path]:
        """The local path of each of ``names``: from the cache, else fetched one after the other
        (each with its progress bar; a partial download resumes where it stopped)."""
        return {name: self._fetch_one(repo, name, offline) for name in names}

    def _fetch_one(self, repo: str, name: str, offline: bool) -> Path:
        errors = self.errors
        try:
            path = self.hf.hf_hub_download(
                repo,
                name,
                revision=self.revision,
                cache_dir=self.env.cache,
                local_dir=self.local_dir,
                endpoint=self.env.endpoint,
                local_files_only=offline,
            )
        except errors.LocalEntryNotFoundError as exc:
            raise HubError(repo, f"{name} is not in the cache and {self.where} cannot be reached") from exc
        except errors.EntryNotFoundError as exc:
            raise HubError(repo, f"{name} is not in the repository (revision {self.revision})") from exc
        except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError) as exc:
            raise self._hub_error(repo, exc) from exc
        except Exception as exc:  # cut off while the body streamed in, or a short body
            raise incomplete(repo, name, exc) from exc
        return Path(path)
