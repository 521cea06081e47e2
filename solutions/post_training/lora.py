"""LoRA: a frozen linear layer plus a trainable low-rank update, and what it saves in memory
(lecture 16, section 2).

Full fine-tuning trains every weight W (out x in) of a model. LoRA (Hu et al. 2021) freezes W and
trains a product B A of rank r instead (A: r x in, B: out x r), so a layer computes
W x + (alpha / r) B A x, and the optimizer holds state for r (in + out) numbers per layer rather
than in x out. The names are PEFT's (huggingface/peft 0.21.2, peft.tuners.lora): base_layer,
lora_A, lora_B, scaling, lora_dropout, merge / unmerge / merged, target_modules; PEFT keeps one
lora_A and lora_B per named adapter (lora_A["default"]), this layer holds a single adapter.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from grader.models.tiny_gpt import TinyGPTConfig


class LoRALinear(nn.Module):
    """base_layer(x) + lora_B(lora_A(lora_dropout(x))) * scaling: a frozen nn.Linear plus a
    trainable update of rank `rank`, as PEFT's LoRA Linear layer with one adapter.

    LoRALinear(base_layer, rank, alpha, dropout=0.0) keeps these attributes:
      base_layer    the nn.Linear given, its weight and its bias (if it has one) frozen:
                    requires_grad set to False;
      lora_A        nn.Linear(in_features, rank, bias=False), its weight initialised as PEFT's
                    default, nn.init.kaiming_uniform_(weight, a=math.sqrt(5)) (uniform in
                    [-1/sqrt(in_features), 1/sqrt(in_features)], from torch's global generator);
      lora_B        nn.Linear(rank, out_features, bias=False), its weight zero, so that a new
                    layer's output equals base_layer(x) exactly;
      lora_dropout  nn.Dropout(dropout) (active in train mode only, as every nn.Dropout);
      scaling       alpha / rank, a float;
      merged        False; True between merge() and unmerge().
    lora_A's and lora_B's weights are created in base_layer.weight's dtype and on its device and
    require grad: they are the layer's only trainable parameters, in every state (merge() and
    unmerge() change no requires_grad).

    forward(x): x [..., in_features] in base_layer's dtype -> [..., out_features].
      Unmerged: base_layer(x) + lora_B(lora_A(lora_dropout(x))) * scaling. Dropout applies to the
      input of the LoRA branch only: base_layer always sees x itself.
      Merged: base_layer(x) alone (the update is inside base_layer.weight), so while merged no
      gradient reaches lora_A or lora_B: merge for inference, unmerge to train again.
    merge(): adds scaling * lora_B.weight @ lora_A.weight to base_layer.weight in place (in its
      dtype); merged becomes True. Outputs are unchanged up to rounding (compare in eval mode:
      in train mode the unmerged branch drops inputs at random).
    unmerge(): subtracts scaling * lora_B.weight @ lora_A.weight from base_layer.weight in
      place, restoring it up to rounding; merged becomes False.

    Raises ValueError when base_layer is not an nn.Linear (a subclass of nn.Linear is one),
    rank < 1, alpha <= 0, dropout is not in [0, 1), merge() is called on a merged layer, or
    unmerge() is called on a layer that is not merged.
    """

    def __init__(self, base_layer: nn.Linear, rank: int, alpha: float, dropout: float = 0.0) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        if not isinstance(base_layer, nn.Linear):
            raise ValueError(f"LoRALinear wraps an nn.Linear, got {type(base_layer).__name__}")
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.base_layer = base_layer
        for parameter in base_layer.parameters():
            parameter.requires_grad_(False)
        weight = base_layer.weight
        factory = {"dtype": weight.dtype, "device": weight.device}
        self.lora_A = nn.Linear(base_layer.in_features, rank, bias=False, **factory)
        self.lora_B = nn.Linear(rank, base_layer.out_features, bias=False, **factory)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.lora_dropout = nn.Dropout(dropout)
        self.rank, self.alpha = rank, alpha
        self.scaling = alpha / rank
        self.merged = False
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        result = self.base_layer(x)
        if self.merged:
            return result
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        ### END SOLUTION

    def merge(self) -> None:
        ### BEGIN SOLUTION
        if self.merged:
            raise ValueError("this LoRALinear is already merged: unmerge() it first")
        with torch.no_grad():
            self.base_layer.weight += self._delta_weight()
        self.merged = True
        ### END SOLUTION

    def unmerge(self) -> None:
        ### BEGIN SOLUTION
        if not self.merged:
            raise ValueError("this LoRALinear is not merged: there is nothing to unmerge")
        with torch.no_grad():
            self.base_layer.weight -= self._delta_weight()
        self.merged = False
        ### END SOLUTION

    ### BEGIN SOLUTION
    def _delta_weight(self) -> torch.Tensor:
        """scaling * B @ A, the update as a full out x in matrix (built only to merge)."""
        return (self.lora_B.weight @ self.lora_A.weight * self.scaling).to(self.base_layer.weight.dtype)

    ### END SOLUTION


def add_lora(
    model: nn.Module, rank: int, alpha: float, target_modules: tuple[str, ...], dropout: float = 0.0
) -> nn.Module:
    """Wrap the targeted nn.Linear layers of `model` in LoRALinear and freeze everything else, in
    place, as PEFT's inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha,
    target_modules=..., lora_dropout=dropout), model) does. Returns `model` itself.

    A module is targeted when it is an nn.Linear and its qualified name (as model.named_modules()
    gives it, e.g. "blocks.0.attention.query") equals one of target_modules or ends with "." and
    one of them (PEFT's suffix matching): "query" and "attention.query" both target every block's
    query projection, "blocks.1.mlp.0" only block 1's first MLP layer, "0" every "...mlp.0" (and
    not the Block "blocks.0", which is no nn.Linear: a matching module that is not an nn.Linear is
    left as it is), and "value" targets nothing ("blocks.0.attention.key_value" does not end with
    ".value").

    Each targeted layer is replaced in its parent module by LoRALinear(layer, rank, alpha,
    dropout), so its parameters are then named "<name>.base_layer.weight" (and ".base_layer.bias"),
    "<name>.lora_A.weight" and "<name>.lora_B.weight". Then every parameter of the model is frozen
    (requires_grad False) except the lora_A and lora_B weights of the new layers, which are the
    only trainable parameters. As lora_B starts at zero, the model's outputs are unchanged.

    TinyGPT (grader/models/tiny_gpt.py) has five nn.Linear per block, "blocks.<i>.attention.query",
    "...attention.key_value" (keys and values in one layer), "...attention.out", "...mlp.0" and
    "...mlp.2"; its output head is tied to token_embedding, an nn.Embedding, so no target reaches
    it.

    Raises ValueError when target_modules is empty, one of its targets matches no nn.Linear of the
    model (the message lists the model's nn.Linear names), or rank, alpha or dropout is one that
    LoRALinear refuses.
    """
    ### BEGIN SOLUTION
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    targeted = _matching(linears, target_modules)
    for name in targeted:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, LoRALinear(getattr(parent, child), rank, alpha, dropout))
    trainable = {f"{name}.lora_{side}.weight" for name in targeted for side in "AB"}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name in trainable)
    return model
    ### END SOLUTION


### BEGIN SOLUTION
def _matching(linears: list[str], target_modules: tuple[str, ...]) -> list[str]:
    """The names in `linears` that some target equals or ends with ("." + target); ValueError
    when there is no target or a target matches none of them."""
    if not target_modules:
        raise ValueError("target_modules is empty: name at least one nn.Linear to adapt")
    for target in target_modules:
        if not any(name == target or name.endswith("." + target) for name in linears):
            raise ValueError(f"target {target!r} matches no nn.Linear of the model; its nn.Linear are {linears}")
    return [name for name in linears if any(name == t or name.endswith("." + t) for t in target_modules)]


def _tiny_gpt_linears(config: TinyGPTConfig) -> dict[str, tuple[int, int, bool]]:
    """Every nn.Linear of TinyGPT(config): name -> (in_features, out_features, has a bias)."""
    d, width = config.d_model, config.num_heads * config.head_dim
    hidden = config.mlp_ratio * d
    shapes = {
        "attention.query": (d, width, False),
        "attention.key_value": (d, 2 * config.num_kv_heads * config.head_dim, False),
        "attention.out": (width, d, False),
        "mlp.0": (d, hidden, True),
        "mlp.2": (hidden, d, True),
    }
    return {f"blocks.{i}.{name}": shape for i in range(config.num_layers) for name, shape in shapes.items()}


### END SOLUTION


def lora_memory(
    config: TinyGPTConfig,
    rank: int,
    target_modules: tuple[str, ...],
    bytes_per_param: int = 2,
    optimizer_bytes_per_param: int = 12,
) -> dict[str, int]:
    """Parameters and training memory of TinyGPT(config) fine-tuned with LoRA, against full
    fine-tuning, counted from `config` alone (without building the model: the count of a model
    too large to build is asked too).

    The LoRA model is add_lora(TinyGPT(config), rank, alpha, target_modules) (alpha changes no
    count; targets match as in add_lora). Returns a dict of ints:
      "base_params"       TinyGPT's parameters, each tensor once (as model.parameters() counts
                          them: the output head is token_embedding's weight, tied);
      "trainable_params"  the LoRA model's trainable parameters: rank * (in_features +
                          out_features) for each targeted nn.Linear;
      "all_params"        base_params + trainable_params (PEFT's get_nb_trainable_parameters()
                          returns (trainable_params, all_params));
      "full_bytes"        training every parameter: base_params * (2 * bytes_per_param +
                          optimizer_bytes_per_param): weight, gradient and optimizer state;
      "lora_bytes"        training LoRA: all_params * bytes_per_param (every weight, frozen or
                          not) + trainable_params * (bytes_per_param + optimizer_bytes_per_param)
                          (gradients and optimizer state of the LoRA weights only).
    The defaults are mixed-precision Adam: 16-bit weights and gradients (2 bytes), and for each
    trained parameter an fp32 master copy and two fp32 moments (12 bytes): 16 bytes per trained
    parameter, 2 per frozen one. Activations, buffers and workspace are not counted.

    TinyGPT(config)'s parameters, with d = d_model, head_dim = d_model // num_heads (integer
    division: num_heads * head_dim may be less than d_model) and hidden = mlp_ratio * d:
    token_embedding (vocab_size x d), position_embedding (max_seq_len x d), and per block two
    LayerNorms (weight and bias of d each), attention.query (d -> num_heads * head_dim),
    attention.key_value (d -> 2 * num_kv_heads * head_dim), attention.out (num_heads * head_dim
    -> d), all without bias, mlp.0 (d -> hidden) and mlp.2 (hidden -> d) with biases; then the
    final LayerNorm (2 d). A layer in -> out holds out x in weights (plus out for a bias).

    Raises ValueError when rank < 1, bytes_per_param < 1, optimizer_bytes_per_param < 0,
    target_modules is empty, or one of its targets matches no nn.Linear of TinyGPT(config).
    """
    ### BEGIN SOLUTION
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    if bytes_per_param < 1 or optimizer_bytes_per_param < 0:
        raise ValueError(
            f"bytes per parameter: weights {bytes_per_param} (>= 1), optimizer {optimizer_bytes_per_param} (>= 0)"
        )
    linears = _tiny_gpt_linears(config)
    targeted = _matching(list(linears), target_modules)
    d = config.d_model
    base = (config.vocab_size + config.max_seq_len) * d + 2 * d  # embeddings, final norm
    base += config.num_layers * 4 * d  # two LayerNorms per block
    base += sum(i * o + (o if bias else 0) for i, o, bias in linears.values())
    trainable = sum(rank * (linears[name][0] + linears[name][1]) for name in targeted)
    everything = base + trainable
    return {
        "base_params": base,
        "trainable_params": trainable,
        "all_params": everything,
        "full_bytes": base * (2 * bytes_per_param + optimizer_bytes_per_param),
        "lora_bytes": everything * bytes_per_param + trainable * (bytes_per_param + optimizer_bytes_per_param),
    }
    ### END SOLUTION


def lora_forward_backward(module: nn.Module, inputs: torch.Tensor, output_weights: torch.Tensor) -> dict:
    """Given (the grader and the notebook use it): one forward of `module` on `inputs`, then the
    backward of (output * output_weights).sum(), every .grad cleared (None) before. Returns
    {"output": the output, detached, "parameters": {name: {"requires_grad": bool, "grad": a copy
    of .grad or None, "shape": list, "dtype": str}}} for module.named_parameters(), in order."""
    for parameter in module.parameters():
        parameter.grad = None
    output = module(inputs)
    if output.requires_grad:  # a model with nothing trainable has no backward to run
        (output * output_weights.to(output.dtype)).sum().backward()
    parameters = {
        name: {
            "requires_grad": parameter.requires_grad,
            "grad": None if parameter.grad is None else parameter.grad.detach().clone(),
            "shape": list(parameter.shape),
            "dtype": str(parameter.dtype).removeprefix("torch."),
        }
        for name, parameter in module.named_parameters()
    }
    return {"output": output.detach(), "parameters": parameters}
