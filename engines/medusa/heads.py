"""Medusa heads: a residual block per head, feeding the target's own (shared) LM head.

Head k (1-based) reads the target's final hidden state h_t at position t (the LM head's input,
which predicts token t+1) and predicts token t+1+k: logits_k = lm_head(h + SiLU(W_k h + b_k)).
W_k starts at zero, so every head starts as the target's next-token head plus a small shift.
Only the blocks are stored (safetensors), with a JSON config naming the target they belong to.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ..atomic import committed, replace_together
from ..bounded_json import SMALL_FILE, loads, read_json
from ..errors import SpecvizError
from ..event_types import wrong_field
from .head_floor import refuse_weak_default

FORMAT = "specviz-medusa-1"
WEIGHTS_FILE = "heads.safetensors"
CONFIG_FILE = "medusa.json"


class ResBlock(nn.Module):
    """x + SiLU(Wx + b), with W zero at first (as in Medusa's reference heads)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """H residual blocks; `features(h)` gives each head's input to the shared LM head."""

    def __init__(self, hidden: int, n_heads: int) -> None:
        super().__init__()
        if n_heads < 1:
            raise ValueError(f"need at least one head, got {n_heads}")
        self.hidden, self.n_heads = hidden, n_heads
        self.blocks = nn.ModuleList(ResBlock(hidden) for _ in range(n_heads))

    def features(self, h: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """(..., hidden) -> (..., n, hidden): the first n heads' features (all by default)."""
        blocks = self.blocks[: n or self.n_heads]
        return torch.stack([block(h) for block in blocks], dim=-2)

    def logits(self, h: torch.Tensor, lm_head: nn.Module, n: int | None = None) -> torch.Tensor:
        """(..., hidden) -> (..., n, vocab), through the target's LM head (one matmul; the
        module may be its int8 copy, engines.machine.precision)."""
        return lm_head(self.features(h, n))


@dataclass
class TargetId:
    """What identifies the model heads were trained on."""

    name: str  # file or folder name, for people
    fingerprint: str  # hash of the LM head's weights: the same weights, whatever the path
    hidden_size: int
    vocab_size: int


@dataclass
class HeadsConfig:
    target: TargetId
    n_heads: int
    hidden_size: int
    training: dict = field(default_factory=dict)  # corpus, tokens, steps, seconds, ...
    accuracy: dict = field(default_factory=dict)  # held-out top1/top5 per head
    format: str = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> HeadsConfig:
        return cls.from_dict(loads(text))

    @classmethod
    def from_dict(cls, data) -> HeadsConfig:
        """ValueError naming what is not as `to_json` writes it."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} config")
        try:
            config = cls(TargetId(**data["target"]), data["n_heads"], data["hidden_size"],
                         data.get("training", {}), data.get("accuracy", {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a {FORMAT} config ({exc})") from None
        wrong = wrong_field(config)
        if wrong:
            raise ValueError(f"its {wrong}")
        if not (0 < config.n_heads <= MAX_HEADS and 0 < config.hidden_size <= MAX_HIDDEN):
            raise ValueError(f"{config.n_heads} heads of width {config.hidden_size} are not "
                             "heads specviz trains")
        return config


def heads_dir(model_path: str | Path) -> Path:
    """Where a model's heads live: beside its .gguf file, or inside its model folder (in
    specviz's cache for a model in another tool's store)."""
    from ..models import side_folder

    return side_folder(model_path, "medusa")


def lm_head_of(model: nn.Module) -> nn.Module:
    head = model.get_output_embeddings()
    if head is None:
        raise SpecvizError("this model has no LM head that Medusa heads could share")
    return head


def target_id(model: nn.Module, model_path: str | Path) -> TargetId:
    """Which target this is, whatever dtype it was loaded in: a hash of a spread of its LM
    head's rows rounded to bfloat16 (a float32 and a bfloat16 load hash alike)."""
    weight = lm_head_of(model).weight.detach()
    return TargetId(Path(model_path).name, _rows_hash(weight, torch.bfloat16),
                    int(weight.shape[1]),
                    int(weight.shape[0]))


def made_for(fingerprint: str, model: nn.Module) -> bool:
    """Whether heads naming `fingerprint` were trained for `model`: today's hash, or the one
    heads trained before it named (rows in float16: only a float32 load reproduces it)."""
    weight = lm_head_of(model).weight.detach()
    return fingerprint in (_rows_hash(weight, torch.bfloat16), _rows_hash(weight, torch.float16))


def mismatch_hint(model: nn.Module) -> str:
    """What to try when heads do not match: older heads name the float32 target."""
    if lm_head_of(model).weight.dtype == torch.float32:
        return ""
    return " (heads trained before 2026-11-25 match a float32 load only: --dtype float32)"


def _rows_hash(weight, dtype) -> str:
    rows = weight[:: max(1, weight.shape[0] // 256)][:256]  # a spread of rows, cheap to hash
    data = rows.to("cpu", dtype).contiguous()
    if dtype == torch.bfloat16:
        data = data.view(torch.int16)  # numpy has no bfloat16: its bits hash the same
    digest = hashlib.sha256(data.numpy().tobytes())
    digest.update(repr(tuple(weight.shape)).encode())
    return digest.hexdigest()[:16]


def save_heads(heads: MedusaHeads, config: HeadsConfig, folder: Path) -> Path:
    """Write the blocks (safetensors, float32) and the config as one unit (hours of training:
    never torn, never one save's weights with another's config); return the folder."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu", torch.float32).contiguous()
               for k, v in heads.state_dict().items()}
    return replace_together(folder, {
        WEIGHTS_FILE: lambda temp: save_file(tensors, str(temp), metadata={"format": FORMAT}),
        CONFIG_FILE: lambda temp: temp.write_text(config.to_json(), encoding="utf-8")})


MAX_HEADS = 64  # Medusa trains up to 5; a config asking for millions would fill memory
MAX_HIDDEN = 1 << 16  # the widest hidden state of any model (Llama 405B's is 16,384)


def load_heads(model: nn.Module, model_path: str | Path,
               folder: Path | None = None) -> tuple[MedusaHeads, HeadsConfig]:
    """The heads trained for this model, on its device and dtype; clear errors otherwise."""
    from safetensors.torch import load_file

    given = folder is not None
    folder = Path(folder) if folder else heads_dir(model_path)
    hint = f"train them with: specviz train-heads --target {model_path}"
    config_file, weights_file = committed(folder, CONFIG_FILE), committed(folder, WEIGHTS_FILE)
    if not config_file.exists() or not weights_file.exists():
        raise SpecvizError(f"no Medusa heads in {folder}; {hint}")
    try:
        config = HeadsConfig.from_dict(read_json(config_file, "config", SMALL_FILE))
        state = load_file(str(weights_file))
    except (OSError, ValueError, SpecvizError) as exc:
        raise SpecvizError(f"cannot read the Medusa heads in {folder}: {exc}; {hint}") from None
    if not given:
        refuse_weak_default(config.accuracy or {}, folder, hint, "--medusa-heads")
    mine = target_id(model, model_path)
    if not made_for(config.target.fingerprint, model):
        raise SpecvizError(
            f"the Medusa heads in {folder} were trained for {config.target.name} "
            f"(fingerprint {config.target.fingerprint}), not this model ({mine.fingerprint})"
            f"{mismatch_hint(model)}; {hint}"
        )
    heads = MedusaHeads(config.hidden_size, config.n_heads)
    try:
        heads.load_state_dict(state)
    except RuntimeError as exc:
        raise SpecvizError(f"the Medusa heads in {folder} do not fit their config: "
                           f"{str(exc).splitlines()[0]}") from None
    weight = lm_head_of(model).weight
    return heads.to(weight.device, weight.dtype).eval(), config
