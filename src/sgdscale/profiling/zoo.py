"""The model zoo: real PyTorch models with synthetic batches, built offline with random weights.

A `Workload` is everything one training step needs: the module, a synthetic batch maker, and a
loss. Profiling, the real distributed runtime and validation all build their models here so the
model that was profiled is exactly the model that was run.

Built-in models (`known_models()`); their default options and batch are `sgdscale.models`, the
same as the shipped profiles', so a name means one model everywhere:
  resnet18 resnet50 vgg16 alexnet mobilenet_v2 densenet121
      torchvision definitions, ``weights=None``. Options: image_size (default 64; alexnet 96),
      num_classes (default 1000). Batch: float32 images ``[b, 3, s, s]``, integer class targets; cross-entropy.
  gpt2   GPT-2-style causal decoder (token + position embedding, pre-LN blocks with causal
         self-attention and a 4x MLP, final LN, LM head tied to the token embedding as in GPT-2).
         Options: layers, hidden, heads, vocab, seq_len, dropout. Next-token cross-entropy.
  bert   BERT-style bidirectional encoder (token + position + segment embedding, post-LN blocks)
         with the masked-LM head (dense, GELU, LN, decoder tied to the word embedding). 15% of the
         positions carry a label. Options as gpt2.
  mlp    ``depth`` Linear+ReLU layers of ``width`` units, then a classifier; the easiest way to
         vary the compute/communication ratio. Options: width, depth, input_dim, num_classes.
  cnn    three conv blocks (``width``, 2x, 4x channels), global pooling, classifier. Options:
         width, image_size (default 32), num_classes.

User models: ``"package.module:factory"``; ``factory()`` is called without arguments and must
return an ``nn.Module``. The batch comes from, in this order:
  1. ``factory.make_batch(batch_size) -> (inputs, targets)`` (and ``factory.loss_fn(outputs,
     targets)`` if present, else the generic loss below);
  2. ``factory.example_input(batch_size) -> inputs``;
  3. the ``input_shape`` option (``--input-shape 3x32x32``: one sample, without the batch
     dimension), filled with standard-normal float32.
The generic loss is cross-entropy against random classes when the ``num_classes`` option is
given and the output is ``[batch, num_classes]`` logits, else the mean of the squared outputs.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from sgdscale.errors import UserError
from sgdscale.models import BUILTIN_MODELS, default_option
from sgdscale.profiling._torch_compat import import_torch, import_torchvision

torch = import_torch()
from torch import Tensor, nn  # noqa: E402  (after the friendly import check above)
from torch.nn import functional as F  # noqa: E402

__all__ = ["Workload", "known_models", "build_workload", "parse_input_shape"]


@dataclass
class Workload:
    """One model ready to train: module, synthetic batches and loss."""

    name: str
    module: nn.Module  # random weights, CPU, train mode
    make_batch: Callable[[int], tuple[Tensor, Tensor]]  # batch_size -> (inputs, targets), CPU
    loss_fn: Callable[[Tensor, Tensor], Tensor]  # (model outputs, targets) -> scalar loss
    input_desc: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- image models

_VISION = ("resnet18", "resnet50", "vgg16", "alexnet", "mobilenet_v2", "densenet121")
# Smallest square input each network accepts (measured: below it a pooling layer gets 0x0).
_MIN_IMAGE_SIZE = {"vgg16": 32, "alexnet": 63, "densenet121": 29}


def _classification_loss(outputs: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(outputs, targets)


def _image_batches(
    generator: torch.Generator, channels: int, image_size: int, num_classes: int
) -> Callable[[int], tuple[Tensor, Tensor]]:
    def make_batch(batch_size: int) -> tuple[Tensor, Tensor]:
        images = torch.randn(batch_size, channels, image_size, image_size, generator=generator)
        labels = torch.randint(0, num_classes, (batch_size,), generator=generator)
        return images, labels

    return make_batch


def _vision(name: str, image_size: int | None, generator: torch.Generator, opts: _Options) -> Workload:
    num_classes = opts.int("num_classes", default_option(name, "num_classes", 1000))
    size = default_option(name, "image_size", 64) if image_size is None else image_size
    minimum = _MIN_IMAGE_SIZE.get(name, 1)
    if size < minimum:
        raise UserError(f"{name} needs images of at least {minimum}x{minimum} pixels; got --image-size {size}")
    opts.done()
    torchvision = import_torchvision()
    module = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    return Workload(
        name=name,
        module=module,
        make_batch=_image_batches(generator, 3, size, num_classes),
        loss_fn=_classification_loss,
        input_desc={"image_size": size, "channels": 3, "num_classes": num_classes},
    )


# --------------------------------------------------------------------------- transformers


class _CausalSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal, self.dropout = heads, causal, dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, h))


class _MLP(nn.Module):
    def __init__(self, hidden: int, dropout: float) -> None:
        super().__init__()
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class _Block(nn.Module):
    """Transformer block; pre-LN (GPT-2) or post-LN (BERT)."""

    def __init__(self, hidden: int, heads: int, dropout: float, causal: bool, pre_ln: bool) -> None:
        super().__init__()
        self.pre_ln = pre_ln
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = _CausalSelfAttention(hidden, heads, dropout, causal)
        self.drop = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = _MLP(hidden, dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self.pre_ln:
            x = x + self.drop(self.attn(self.ln_1(x)))
            return x + self.mlp(self.ln_2(x))
        x = self.ln_1(x + self.drop(self.attn(x)))
        return self.ln_2(x + self.mlp(x))


class GPT2(nn.Module):
    """GPT-2-style causal language model; the LM head shares the token embedding, as in GPT-2."""

    def __init__(self, vocab: int, seq_len: int, layers: int, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(hidden, heads, dropout, causal=True, pre_ln=True) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(_init_transformer)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(positions))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class BERT(nn.Module):
    """BERT-style bidirectional encoder with the masked-LM head (decoder tied to the word embedding)."""

    def __init__(self, vocab: int, seq_len: int, layers: int, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(seq_len, hidden)
        self.segment = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(hidden, heads, dropout, causal=False, pre_ln=False) for _ in range(layers))
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_ln = nn.LayerNorm(hidden)
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.word.weight
        self.apply(_init_transformer)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        segments = (positions >= tokens.shape[1] // 2).long()
        x = self.drop(self.ln(self.word(tokens) + self.position(positions) + self.segment(segments)))
        for block in self.blocks:
            x = block(x)
        return self.decoder(self.mlm_ln(F.gelu(self.mlm_dense(x))))


def _init_transformer(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def _token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


# Small enough for well under a second per step at batch 8 on one CPU thread (sgdscale.models).
_TRANSFORMER_DEFAULTS = {name: BUILTIN_MODELS[name].options for name in ("gpt2", "bert")}


def _transformer(name: str, seq_len: int | None, generator: torch.Generator, opts: _Options) -> Workload:
    defaults = _TRANSFORMER_DEFAULTS[name]
    layers = opts.int("layers", defaults["layers"])
    hidden = opts.int("hidden", defaults["hidden"])
    heads = opts.int("heads", defaults["heads"])
    vocab = opts.int("vocab", defaults["vocab"], minimum=2)
    dropout = opts.float("dropout", defaults["dropout"])
    seq = defaults["seq_len"] if seq_len is None else seq_len
    if seq < 1:
        raise UserError(f"--seq-len must be at least 1; got {seq}")
    if hidden % heads:
        raise UserError(f"{name}: hidden size {hidden} must be a multiple of the number of heads {heads}")
    if not 0.0 <= dropout < 1.0:
        raise UserError(f"{name}: dropout must be in [0, 1); got {dropout}")
    opts.done()
    cls = GPT2 if name == "gpt2" else BERT
    module = cls(vocab=vocab, seq_len=seq, layers=layers, hidden=hidden, heads=heads, dropout=dropout)

    if name == "gpt2":

        def make_batch(batch_size: int) -> tuple[Tensor, Tensor]:
            tokens = torch.randint(0, vocab, (batch_size, seq + 1), generator=generator)
            return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    else:

        def make_batch(batch_size: int) -> tuple[Tensor, Tensor]:
            tokens = torch.randint(0, vocab, (batch_size, seq), generator=generator)
            masked = torch.rand(batch_size, seq, generator=generator) < 0.15
            masked[:, 0] = True  # at least one label per sequence, so the loss is defined
            labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
            return tokens, labels

    return Workload(
        name=name,
        module=module,
        make_batch=make_batch,
        loss_fn=_token_loss,
        input_desc={"seq_len": seq, "vocab": vocab, "layers": layers, "hidden": hidden, "heads": heads,
                    "dropout": dropout},
    )


# --------------------------------------------------------------------------- synthetic models


def _mlp(generator: torch.Generator, opts: _Options) -> Workload:
    width = opts.int("width", default_option("mlp", "width", 2048))
    depth = opts.int("depth", default_option("mlp", "depth", 4))
    input_dim = opts.int("input_dim", width)
    num_classes = opts.int("num_classes", default_option("mlp", "num_classes", 10))
    opts.done()
    layers: list[nn.Module] = []
    fan_in = input_dim
    for _ in range(depth):
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    layers.append(nn.Linear(fan_in, num_classes))
    module = nn.Sequential(*layers)

    def make_batch(batch_size: int) -> tuple[Tensor, Tensor]:
        return (
            torch.randn(batch_size, input_dim, generator=generator),
            torch.randint(0, num_classes, (batch_size,), generator=generator),
        )

    return Workload(
        name="mlp",
        module=module,
        make_batch=make_batch,
        loss_fn=_classification_loss,
        input_desc={"input_dim": input_dim, "width": width, "depth": depth, "num_classes": num_classes},
    )


def _cnn(image_size: int | None, generator: torch.Generator, opts: _Options) -> Workload:
    width = opts.int("width", default_option("cnn", "width", 32))
    num_classes = opts.int("num_classes", default_option("cnn", "num_classes", 10))
    size = default_option("cnn", "image_size", 32) if image_size is None else image_size
    if size < 4:
        raise UserError(f"cnn needs images of at least 4x4 pixels (two 2x2 poolings); got --image-size {size}")
    opts.done()
    module = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.BatchNorm2d(4 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(4 * width, num_classes),
    )
    return Workload(
        name="cnn",
        module=module,
        make_batch=_image_batches(generator, 3, size, num_classes),
        loss_fn=_classification_loss,
        input_desc={"image_size": size, "channels": 3, "width": width, "num_classes": num_classes},
    )


# --------------------------------------------------------------------------- user models


def parse_input_shape(text: str | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """'3x32x32' (one sample, no batch dimension) -> (3, 32, 32)."""
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        try:
            parts = [int(p) for p in str(text).lower().replace(",", "x").split("x") if p.strip()]
        except ValueError:
            parts = []
    if not parts or any(not isinstance(p, int) or p < 1 for p in parts):
        raise UserError(
            f"bad input shape {text!r}: give one sample's dimensions without the batch, as positive "
            "integers joined by 'x', e.g. --input-shape 3x32x32"
        )
    return tuple(parts)


def _first_tensor(outputs: Any) -> Tensor:
    if isinstance(outputs, Tensor):
        return outputs
    if isinstance(outputs, (tuple, list)) and outputs and isinstance(outputs[0], Tensor):
        return outputs[0]
    if isinstance(outputs, dict):
        for value in outputs.values():
            if isinstance(value, Tensor):
                return value
    raise UserError(
        f"the model returned {type(outputs).__name__}, not a tensor; give the factory a loss_fn(outputs, "
        "targets) attribute that turns it into a scalar loss"
    )


def _generic_loss(outputs: Any, targets: Tensor) -> Tensor:
    """Cross-entropy for [batch, classes] logits against integer targets; mean square otherwise."""
    out = _first_tensor(outputs)
    if targets.dtype == torch.long and out.dim() == 2 and targets.dim() == 1 and out.shape[0] == targets.shape[0]:
        return F.cross_entropy(out, targets)
    return out.float().pow(2).mean()


def _user(spec: str, generator: torch.Generator, opts: _Options) -> Workload:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"bad model '{spec}': give a built-in name or 'package.module:factory'")
    try:
        imported = importlib.import_module(module_name)
    except Exception as error:  # an import can fail with anything the module raises
        raise UserError(
            f"cannot import '{module_name}' for model '{spec}': {type(error).__name__}: {error} "
            "(is the package installed or on PYTHONPATH?)"
        ) from None
    try:
        factory = getattr(imported, attr)
    except AttributeError:
        raise UserError(f"module '{module_name}' has no attribute '{attr}' (model '{spec}')") from None
    if not callable(factory):
        raise UserError(f"'{spec}' is not callable; it must be a function or class returning an nn.Module")
    try:
        module = factory()
    except Exception as error:
        raise UserError(f"calling the factory '{spec}()' failed: {type(error).__name__}: {error}") from None
    if not isinstance(module, nn.Module):
        raise UserError(f"the factory '{spec}' returned {type(module).__name__}, not a torch.nn.Module")

    num_classes = opts.get("num_classes")
    input_shape = opts.get("input_shape")
    opts.done()
    loss_fn = getattr(factory, "loss_fn", None) or _generic_loss
    desc: dict[str, Any] = {"factory": spec}
    make_batch = getattr(factory, "make_batch", None)
    example_input = getattr(factory, "example_input", None)
    if callable(make_batch):
        desc["batch"] = "factory.make_batch"
    elif callable(example_input):
        desc["batch"] = "factory.example_input"
        make_batch = _with_targets(example_input, num_classes, generator)
    elif input_shape is not None:
        shape = parse_input_shape(input_shape)
        desc["input_shape"] = list(shape)

        def make_inputs(batch_size: int) -> Tensor:
            return torch.randn(batch_size, *shape, generator=generator)

        make_batch = _with_targets(make_inputs, num_classes, generator)
    else:
        raise UserError(
            f"model '{spec}': say what its input looks like with --input-shape (one sample, e.g. 3x32x32), "
            "or give the factory a make_batch(batch_size) -> (inputs, targets) attribute"
        )
    if num_classes is not None:
        desc["num_classes"] = int(num_classes)
    return Workload(name=spec, module=module, make_batch=make_batch, loss_fn=loss_fn, input_desc=desc)


def _with_targets(
    make_inputs: Callable[[int], Tensor], num_classes: Any, generator: torch.Generator
) -> Callable[[int], tuple[Tensor, Tensor]]:
    def make_batch(batch_size: int) -> tuple[Tensor, Tensor]:
        inputs = make_inputs(batch_size)
        if num_classes is None:
            return inputs, torch.zeros(batch_size)
        return inputs, torch.randint(0, int(num_classes), (batch_size,), generator=generator)

    return make_batch


# --------------------------------------------------------------------------- entry points


class _Options:
    """Model options: each builder takes what it knows; leftovers are a user error."""

    def __init__(self, model: str, options: dict[str, Any]) -> None:
        self.model = model
        self.left = {k: v for k, v in options.items() if v is not None}
        self.known: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.known.append(key)
        return self.left.pop(key, default)

    def int(self, key: str, default: int, minimum: int = 1) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise UserError(f"{self.model}: option {key} must be an integer >= {minimum}; got {value!r}")
        return value

    def float(self, key: str, default: float) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UserError(f"{self.model}: option {key} must be a number; got {value!r}")
        return float(value)

    def done(self) -> None:
        if self.left:
            raise UserError(
                f"model {self.model} does not take option(s) {', '.join(sorted(self.left))}; "
                f"it takes: {', '.join(self.known) or 'none'}"
            )


def known_models() -> list[str]:
    """Built-in model names (user models are 'package.module:factory')."""
    return [*_VISION, "gpt2", "bert", "mlp", "cnn"]


def build_workload(
    model: str, *, image_size: int | None = None, seq_len: int | None = None, seed: int = 0, **options: Any
) -> Workload:
    """Build `model` (built-in name or 'package.module:factory') with random weights (seeded), on
    the CPU, in train mode. Options that are None are ignored; unknown ones are a UserError."""
    if image_size is not None and (isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1):
        raise UserError(f"--image-size must be a positive integer; got {image_size!r}")
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int)):
        raise UserError(f"--seq-len must be a positive integer; got {seq_len!r}")
    opts = _Options(model, options)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    is_image = model in _VISION or model == "cnn"
    if image_size is not None and not is_image and ":" not in model and model in known_models():
        raise UserError(f"--image-size applies to image models; {model} does not take it")
    if seq_len is not None and model in known_models() and model not in ("gpt2", "bert"):
        raise UserError(f"--seq-len applies to gpt2 and bert; {model} does not take it")
    if model in _VISION:
        workload = _vision(model, image_size, generator, opts)
    elif model in ("gpt2", "bert"):
        workload = _transformer(model, seq_len, generator, opts)
    elif model == "mlp":
        workload = _mlp(generator, opts)
    elif model == "cnn":
        workload = _cnn(image_size, generator, opts)
    elif ":" in model:
        if image_size is not None or seq_len is not None:
            raise UserError("--image-size/--seq-len apply to built-in models; describe a user model's input with --input-shape")
        workload = _user(model, generator, opts)
    else:
        raise UserError(
            f"unknown model '{model}'; built-in models: {', '.join(known_models())}; "
            "or give your own as 'package.module:factory'"
        )
    workload.module.train()
    return workload
