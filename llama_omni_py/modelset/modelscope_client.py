"""ModelScope as a hub (``--hub modelscope`` or ``OMNI_HUB=modelscope``), through the ``modelscope``
package (``pip install 'llama-omni-py[modelscope]'``): its file listing, and its snapshot_download
for one set's files (in parallel, each checked against ModelScope's size and SHA-256, resumed
where a download stopped) into its cache (``MODELSCOPE_CACHE``) or a directory; ``MODELSCOPE_ENDPOINT``
points it at another server."""

from __future__ import annotations

from pathlib import Path

from ..env import HubEnvironment
from ..errors import HubError, ModelFileError
from .hub_clients import RemoteFile, Unreachable, import_client, incomplete, network_failure


def _named(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is an instance of a class called ``name`` (modelscope has moved its error
    classes between modules across versions)."""
    return any(c.__name__ == name for c in type(exc).__mro__)


class ModelScopeClient:
    name = "ModelScope"

    def __init__(self, env: HubEnvironment, local_dir: Path | None, revision: str | None):
        import_client("modelscope", "pip install 'llama-omni-py[modelscope]'")
        self.env, self.local_dir, self.revision = env, local_dir, revision or "master"
        self.where = env.endpoint or "ModelScope"

    def _hub_error(self, repo: str, exc: BaseException) -> Exception:
        if network_failure(exc):
            return Unreachable(f"{self.where} cannot be reached ({type(exc).__name__})")
        if _named(exc, "NotExistError") or getattr(getattr(exc, "response", None), "status_code", None) == 404:
            return HubError(repo, f"no such directory, nor model repository (revision {self.revision}) on {self.where}")
        return HubError(repo, f"{self.where} refused the request: {str(exc).splitlines()[0]}")

    def listing(self, repo: str) -> dict[str, RemoteFile]:
        from modelscope.hub.api import HubApi

        try:
            files = HubApi(endpoint=self.env.endpoint).get_model_files(repo, revision=self.revision, recursive=True)
        except Exception as exc:
            raise self._hub_error(repo, exc) from exc
        return {
            f["Path"]: RemoteFile(f["Path"], f.get("Size"), f.get("Sha256"))
            for f in files
            if f.get("Type", "blob") != "tree"
        }

    def _snapshot(self, repo: str, names: list[str] | None, offline: bool) -> Path:
        from modelscope import snapshot_download

        return Path(
            snapshot_download(
                repo,
                revision=self.revision,
                cache_dir=self.env.cache,
                local_dir=str(self.local_dir) if self.local_dir is not None else None,
                allow_patterns=names,
                local_files_only=offline,
                endpoint=self.env.endpoint,
            )
        )

    def cached_root(self, repo: str, names: list[str]) -> Path | None:
        try:
            root = self._snapshot(repo, None, True)
        except Exception:  # nothing cached: each modelscope version says so its own way
            return None
        return root if any((root / n).is_file() for n in names) else None

    def is_cached(self, repo: str, name: str) -> bool:
        root = self.cached_root(repo, [name])
        return root is not None

    def fetch(self, repo: str, names: list[str], offline: bool) -> dict[str, Path]:
        try:
            root = self._snapshot(repo, names, offline)
        except Exception as exc:
            failed = getattr(exc, "failed_files", None) or {}
            if failed:
                name, cause = next(iter(failed.items()))
                raise incomplete(repo, name, cause) from exc
            error = self._hub_error(repo, exc)
            raise (error if isinstance(error, HubError) else HubError(repo, str(error))) from exc
        paths = {n: root / n for n in names}
        absent = [n for n, p in paths.items() if not p.is_file()]
        if absent:
            raise ModelFileError("not fetched: ModelScope's snapshot lacks it", f"{repo}/{absent[0]}")
        return paths
