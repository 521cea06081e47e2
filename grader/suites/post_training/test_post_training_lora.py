"""Hidden suite, part A (lora.py): LoRALinear against its formula in float64 (written here from
the layer's own weights), its initialisation, which parameters train and where gradients go,
merge and unmerge, dropout on the LoRA branch only; add_lora on TinyGPTs of several shapes and
target sets against the same model wrapped here (lora_reference.py); lora_memory against the
parameters of TinyGPTs built (on the meta device) and wrapped here, one of them too large to
build for real; and every refusal. PEFT is not imported here: tests/test_post_training_lora.py
ties the reference to PEFT 0.21.2."""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch
from torch import nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.sandbox import Saved, Step
from grader.suites.post_training import lora_reference as ref
from grader.testing import RUN_SEED, assert_matches, expect_exception, generator

_rng = random.Random(RUN_SEED)
SEED = _rng.randrange(10**6)
WHERE = "(see LoRALinear's docstring, lecture 16 section 2)"


def _linear(
    in_features: int, out_features: int, bias: bool, dtype: torch.dtype, *salt: object, kind: type = nn.Linear
) -> nn.Linear:
    """An nn.Linear (or the subclass `kind`) with weights drawn from the run's seed (never zero)."""
    gen = generator("lora-base", in_features, out_features, bias, *salt)
    layer = kind(in_features, out_features, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(out_features, in_features, generator=gen) / math.sqrt(in_features))
        if bias:
            layer.bias.copy_(torch.randn(out_features, generator=gen))
    return layer.to(dtype)


def _base(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """base_layer(x) in float64, here."""
    out = x.double() @ layer.weight.detach().double().T
    return out + layer.bias.detach().double() if layer.bias is not None else out


def _layer_with(base: nn.Linear, rank: int, alpha: float, a: torch.Tensor, b: torch.Tensor, **kwargs) -> list[Step]:
    """Steps building the student's LoRALinear around `base` and loading lora_A = a, lora_B = b."""
    return [
        Step("LoRALinear", (base, rank, alpha), kwargs, save_as="layer", send_back=False),
        Step("layer.load_state_dict", ({"lora_A.weight": a, "lora_B.weight": b},), {"strict": False}, send_back=False),
    ]


def _low_rank(in_features: int, out_features: int, rank: int, *salt: object) -> tuple[torch.Tensor, torch.Tensor]:
    gen = generator("lora-ab", in_features, out_features, rank, *salt)
    a = torch.randn(rank, in_features, generator=gen, dtype=torch.float64) / math.sqrt(in_features)
    b = torch.randn(out_features, rank, generator=gen, dtype=torch.float64)
    return a, b


# ---------------------------------------------------------------- LoRALinear


@pytest.mark.points(3)
@pytest.mark.parametrize(
    ("in_features", "out_features", "rank", "alpha", "bias", "kind"),
    [
        (24, 40, 4, 8.0, True, nn.Linear),
        (7, 5, 1, 3.0, False, nn.Linear),
        # torch's own subclass of nn.Linear (MultiheadAttention's out_proj): "a subclass of nn.Linear is one"
        (30, 18, 6, 4.5, True, NonDynamicallyQuantizableLinear),
    ],
    ids=["24x40-r4-alpha8", "7x5-r1-alpha3-no-bias", "30x18-r6-alpha4.5-linear-subclass"],
)
def test_lora_forward_is_the_base_plus_the_low_rank_product_scaled_by_alpha_over_rank(
    submission, in_features, out_features, rank, alpha, bias, kind
):
    """Docstring: forward = base_layer(x) + lora_B(lora_A(lora_dropout(x))) * scaling with
    scaling = alpha / rank, for an nn.Linear or a subclass of it. Float64, a 3-D x, A and B loaded
    (nonzero), dropout 0 in train mode (nn.Module's default). Expected: x W^T + b + (alpha / rank)
    x A^T B^T, computed here."""
    base = _linear(in_features, out_features, bias, torch.float64, kind=kind)
    a, b = _low_rank(in_features, out_features, rank)
    x = torch.randn(3, 5, in_features, generator=generator("lora-x", in_features), dtype=torch.float64)
    steps = [
        *_layer_with(base, rank, alpha, a, b),
        Step("layer.forward", (x,)),
        Step("layer.__getattribute__", ("scaling",)),
    ]
    out, scaling = submission.script(steps).steps[0][-2:]
    assert scaling == pytest.approx(alpha / rank, rel=1e-12), (
        f"scaling: expected alpha / rank = {alpha} / {rank} = {alpha / rank}, got {scaling} {WHERE}"
    )
    expected = _base(base, x) + (alpha / rank) * (x @ a.T) @ b.T
    assert_matches(
        out, expected, f"LoRALinear({in_features} -> {out_features}, rank={rank}, alpha={alpha}) forward vs "
        f"x W^T + b + (alpha / rank) x A^T B^T {WHERE}", 1e-12, 1e-12,
    )  # fmt: skip


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_a_new_lora_layer_starts_from_pefts_init_in_the_base_dtype_and_outputs_the_base(submission, dtype):
    """Docstring: lora_A by kaiming_uniform_(a=sqrt(5)), i.e. uniform in +-1/sqrt(in_features);
    lora_B zero; both in base_layer.weight's dtype; so a new layer's output is base_layer(x)
    exactly. A 96 -> 40 layer of rank 8: A's 768 values lie within the bound, and their standard
    deviation is within 15 % of the uniform's, bound / sqrt(3) (a normal init, std 1, is far out)."""
    in_features, out_features, rank = 96, 40, 8
    base = _linear(in_features, out_features, True, dtype, "init")
    x = torch.randn(4, in_features, generator=generator("lora-init-x"), dtype=torch.float64).to(dtype)
    steps = [
        Step("LoRALinear", (base, rank, 16.0), save_as="layer", send_back=False),
        Step("layer.lora_A.weight.clone"),
        Step("layer.lora_B.weight.clone"),
        Step("layer.forward", (x,)),
    ]
    a, b, out = submission.script(steps).steps[0][1:]
    for name, weight, shape in (("lora_A", a, (rank, in_features)), ("lora_B", b, (out_features, rank))):
        assert tuple(weight.shape) == shape, f"{name}.weight: expected shape {shape}, got {tuple(weight.shape)} {WHERE}"
        assert weight.dtype == dtype, f"{name}.weight: expected base_layer's dtype {dtype}, got {weight.dtype} {WHERE}"
    assert not b.any(), (
        f"lora_B.weight must start at zero (PEFT's default), got {int(b.count_nonzero())} nonzero values {WHERE}"
    )
    bound = 1 / math.sqrt(in_features)
    assert a.any() and a.abs().max() <= bound * (1 + 1e-6), (
        f"lora_A.weight: kaiming_uniform_(a=sqrt(5)) draws in +-1/sqrt(in_features) = +-{bound:.4f}; "
        f"got values up to {a.abs().max():.4f} (all zero: {not a.any()}) {WHERE}"
    )
    std, expected_std = a.double().std().item(), bound / math.sqrt(3)
    assert abs(std - expected_std) <= 0.15 * expected_std, (
        f"lora_A.weight: the standard deviation of kaiming_uniform_(a=sqrt(5)) is {expected_std:.4f}, "
        f"got {std:.4f} {WHERE}"
    )
    assert out.dtype == dtype, f"forward: expected base_layer's dtype {dtype}, got {out.dtype}"
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert_matches(out.double(), _base(base, x), f"a new LoRALinear's output vs base_layer(x) {WHERE}", tol, tol)


@pytest.mark.points(3)
def test_only_lora_a_and_b_are_trainable_and_receive_gradients(submission):
    """Docstring: base_layer's weight and bias frozen (requires_grad False), lora_A and lora_B
    trainable. One forward and backward of (output * g).sum() (given lora_forward_backward),
    float64, A and B nonzero: their gradients equal torch.autograd's here (1e-12), the base's
    are None."""
    in_features, out_features, rank, alpha = 13, 11, 3, 5.0
    base = _linear(in_features, out_features, True, torch.float64, "grad")
    a, b = _low_rank(in_features, out_features, rank, "grad")
    x = torch.randn(2, 6, in_features, generator=generator("lora-grad-x"), dtype=torch.float64)
    g = torch.randn(2, 6, out_features, generator=generator("lora-grad-g"), dtype=torch.float64)
    steps = [*_layer_with(base, rank, alpha, a, b), Step("lora_forward_backward", (Saved("layer"), x, g))]
    report = submission.script(steps).steps[0][-1]["parameters"]
    expected_names = {"base_layer.weight", "base_layer.bias", "lora_A.weight", "lora_B.weight"}
    assert set(report) == expected_names, (
        f"LoRALinear's parameters: expected {sorted(expected_names)}, got {sorted(report)} {WHERE}"
    )
    for name in ("base_layer.weight", "base_layer.bias"):
        assert not report[name]["requires_grad"], f"{name} must be frozen (requires_grad False) {WHERE}"
        assert report[name]["grad"] is None, f"{name} received a gradient: the base must stay frozen {WHERE}"
    la, lb = a.clone().requires_grad_(), b.clone().requires_grad_()
    (((_base(base, x) + (alpha / rank) * (x @ la.T) @ lb.T) * g).sum()).backward()
    for name, expected in (("lora_A.weight", la.grad), ("lora_B.weight", lb.grad)):
        assert report[name]["requires_grad"], f"{name} must be trainable (requires_grad True) {WHERE}"
        assert report[name]["grad"] is not None, f"{name} received no gradient {WHERE}"
        assert_matches(report[name]["grad"], expected, f"the gradient of {name} vs torch.autograd's", 1e-12, 1e-12)


@pytest.mark.points(3)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_merge_folds_the_scaled_update_into_the_base_weight_and_unmerge_undoes_it(submission, bias):
    """Docstring: merge() adds scaling * B @ A to base_layer.weight and the forward then uses
    base_layer alone (no gradient reaches A or B), outputs unchanged; unmerge() subtracts it again;
    merged False -> True -> False; requires_grad unchanged. Float64, eval mode, 1e-12. Expected:
    W + (alpha / rank) B A, computed here."""
    in_features, out_features, rank, alpha = 19, 14, 5, 7.0
    base = _linear(in_features, out_features, bias, torch.float64, "merge")
    a, b = _low_rank(in_features, out_features, rank, "merge")
    x = torch.randn(4, in_features, generator=generator("lora-merge-x", bias), dtype=torch.float64)
    g = torch.ones(4, out_features, dtype=torch.float64)
    merged = Step("layer.__getattribute__", ("merged",))
    steps = [
        *_layer_with(base, rank, alpha, a, b),
        Step("layer.eval", send_back=False),
        merged,
        Step("layer.forward", (x,)),
        Step("layer.merge"),
        merged,
        Step("layer.base_layer.weight.clone"),
        Step("lora_forward_backward", (Saved("layer"), x, g)),
        Step("layer.unmerge"),
        merged,
        Step("layer.base_layer.weight.clone"),
        Step("layer.forward", (x,)),
    ]
    _, _, _, before, out0, _, after_merge, w1, report, _, after_unmerge, w2, out2 = submission.script(steps).steps[0]
    assert (before, after_merge, after_unmerge) == (False, True, False), (
        f"merged: expected False, then True after merge(), False after unmerge(); got {before}, {after_merge}, "
        f"{after_unmerge} {WHERE}"
    )
    expected_w1 = base.weight.detach() + (alpha / rank) * b @ a
    assert_matches(w1, expected_w1, f"base_layer.weight after merge() vs W + (alpha / rank) B A {WHERE}", 1e-12, 1e-12)
    assert_matches(report["output"], out0, f"the merged layer's output vs the unmerged one's {WHERE}", 1e-12, 1e-12)
    for name in ("lora_A.weight", "lora_B.weight"):
        entry = report["parameters"][name]
        assert entry["requires_grad"], f"{name} must stay trainable (requires_grad True) after merge() {WHERE}"
        assert entry["grad"] is None, (
            f"{name} received a gradient while merged: a merged layer computes base_layer(x) alone {WHERE}"
        )
    assert not report["parameters"]["base_layer.weight"]["requires_grad"], (
        f"merge() must keep base_layer frozen {WHERE}"
    )
    assert_matches(
        w2, base.weight.detach(), f"base_layer.weight after merge() then unmerge() vs W {WHERE}", 1e-12, 1e-12
    )
    assert_matches(out2, out0, f"the output after merge() then unmerge() vs before {WHERE}", 1e-12, 1e-12)


@pytest.mark.points(1)
def test_merging_a_merged_layer_or_unmerging_an_unmerged_one_raises_value_error(submission):
    """Docstring: "Raises ValueError when ... merge() is called on a merged layer, or unmerge() is
    called on a layer that is not merged" (a second merge would add the update twice)."""
    base = _linear(6, 4, True, torch.float32, "twice")
    build = Step("LoRALinear", (base, 2, 4.0), save_as="layer", send_back=False)
    for what, steps in (
        ("merge() twice", [build, Step("layer.merge"), Step("layer.merge")]),
        ("unmerge() on a new layer", [build, Step("layer.unmerge")]),
        (
            "unmerge() twice after one merge()",
            [build, Step("layer.merge"), Step("layer.unmerge"), Step("layer.unmerge")],
        ),
    ):
        try:
            expect_exception("ValueError", lambda steps=steps: submission.script(steps))
        except AssertionError as error:
            raise AssertionError(f"LoRALinear, {what}: {error}") from None


@pytest.mark.points(3)
@pytest.mark.parametrize("p", [0.5, 0.25], ids=["p0.5", "p0.25"])
def test_dropout_drops_inputs_of_the_lora_branch_only_and_only_in_train_mode(submission, p):
    """Docstring: lora_dropout (nn.Dropout(dropout)) on the LoRA branch's input only; base_layer
    sees x. A = I, B = I, rank = in = out = 12, alpha = 12 (scaling 1): in train mode output -
    base_layer(x) must be dropout(x), each value 0 or x / (1 - p), about a fraction p of them 0
    (1200 values; within 0.1, 7 standard deviations); in eval mode it is x itself, the same on two calls."""
    n = 12
    base = _linear(n, n, True, torch.float64, "dropout")
    eye = torch.eye(n, dtype=torch.float64)
    x = torch.randn(100, n, generator=generator("lora-dropout-x", p), dtype=torch.float64) + 3.0  # no zero inputs
    steps = [
        *_layer_with(base, n, float(n), eye, eye, dropout=p),
        Step("layer.train", send_back=False),
        Step("layer.forward", (x,)),
        Step("layer.eval", send_back=False),
        Step("layer.forward", (x,)),
        Step("layer.forward", (x,)),
    ]
    trained, evaluated, again = (r for r in submission.script(steps).steps[0][-5:] if r is not None)
    branch = trained - _base(base, x)
    dropped = branch.abs() < 1e-9
    kept = (branch - x / (1 - p)).abs() < 1e-9
    assert bool((dropped | kept).all()), (
        f"dropout={p}, train mode, A = B = I, scaling 1: output - base_layer(x) must be dropout(x), each value 0 or "
        f"x / (1 - p); {int((~(dropped | kept)).sum())} of {x.numel()} values are neither (is the dropout applied to "
        f"the base's input or to the output, or not rescaled?) {WHERE}"
    )
    fraction = dropped.double().mean().item()
    assert abs(fraction - p) <= 0.1, (
        f"dropout={p} in train mode: expected about {p:.0%} of the LoRA branch's inputs dropped, "
        f"got {fraction:.0%} {WHERE}"
    )
    assert_matches(
        evaluated, _base(base, x) + x, f"dropout={p}, eval mode: output vs base_layer(x) + x (no dropout)", 1e-12, 1e-12
    )
    assert_matches(again, evaluated, "eval mode: a second forward of the same x", 0, 0)


LINEAR_REFUSALS = [
    ("an nn.Embedding base", "embedding", 2, 4.0, 0.0),
    ("rank 0", "linear", 0, 4.0, 0.0),
    ("rank -2", "linear", -2, 4.0, 0.0),
    ("alpha 0", "linear", 2, 0.0, 0.0),
    ("alpha -1.5", "linear", 2, -1.5, 0.0),
    ("dropout -0.1", "linear", 2, 4.0, -0.1),
    ("dropout 1.0", "linear", 2, 4.0, 1.0),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("why", "kind", "rank", "alpha", "dropout"), LINEAR_REFUSALS, ids=[c[0] for c in LINEAR_REFUSALS]
)
def test_lora_linear_refuses_each_bad_argument_with_value_error(submission, why, kind, rank, alpha, dropout):
    """Docstring: "Raises ValueError when base_layer is not an nn.Linear ..., rank < 1, alpha <= 0,
    dropout is not in [0, 1)" (each alone; dropout 1.0 is out: it would drop everything)."""
    base = nn.Embedding(10, 6) if kind == "embedding" else _linear(6, 4, True, torch.float32, "refuse")
    try:
        expect_exception(
            "ValueError",
            lambda: submission.script([Step("LoRALinear", (base, rank, alpha, dropout), send_back=False)]),
        )
    except AssertionError as error:
        raise AssertionError(f"LoRALinear with {why}: {error}") from None


# ---------------------------------------------------------------- add_lora on TinyGPT

ADD_CASES = [
    # every query and key_value projection, 3 blocks, 6 heads of 8 sharing 2 key/value heads
    ("qkv-3-layers-gqa", dict(num_layers=3, d_model=48, num_heads=6, num_kv_heads=2), 4, ("query", "key_value")),
    # "0" matches the Block blocks.0 (not an nn.Linear: left alone) and every mlp.0
    ("digit-target-matches-a-block-too", dict(), 1, ("0",)),
    # dotted suffixes and one block's layer only
    ("dotted-and-one-block", dict(num_layers=3), 2, ("attention.out", "blocks.1.mlp.2", "blocks.2.mlp.0")),
    # a layer matched by two targets is wrapped once
    ("overlapping-targets", dict(), 3, ("blocks.0.attention.query", "query", "mlp.2")),
]


@pytest.mark.points(3)
@pytest.mark.parametrize(("case", "shape", "rank", "targets"), ADD_CASES, ids=[c[0] for c in ADD_CASES])
def test_add_lora_wraps_exactly_the_targeted_linears_freezes_the_rest_and_keeps_the_outputs(
    submission, case, shape, rank, targets
):
    """Docstring: every nn.Linear whose name equals a target or ends with "." + a target is
    replaced by LoRALinear (parameters <name>.base_layer.weight/.bias, <name>.lora_A.weight,
    <name>.lora_B.weight), every other parameter frozen; the model's output at initialisation
    equals the original's (float64, 1e-12); after one backward only lora_A and lora_B have a
    gradient. Expected: names, shapes and requires_grad of the same TinyGPT wrapped here."""
    config = TinyGPTConfig(max_seq_len=16, **shape)
    model = TinyGPT.from_seed(config, SEED, torch.float64)
    ids = torch.randint(0, config.vocab_size, (2, 9), generator=generator("lora-ids", case))
    g = torch.randn(2, 9, config.vocab_size, generator=generator("lora-g", case), dtype=torch.float64)
    alpha = 2.0 * rank
    steps = [
        Step("add_lora", (model, rank, alpha, targets), save_as="model", send_back=False),
        Step("lora_forward_backward", (Saved("model"), ids, g)),
    ]
    report = submission.script(steps).steps[0][-1]
    expected = ref.parameter_table(ref.wrap(copy.deepcopy(model), rank, targets))
    got = {name: (entry["shape"], entry["requires_grad"]) for name, entry in report["parameters"].items()}
    where = f"add_lora(TinyGPT, rank={rank}, target_modules={targets}) (see add_lora's docstring)"
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert not missing and not extra, f"{where}: parameters missing {missing[:6]}, unexpected {extra[:6]}"
    for name, (shape_expected, trainable) in expected.items():
        assert got[name][0] == shape_expected, f"{where}: {name} has shape {got[name][0]}, expected {shape_expected}"
        assert got[name][1] == trainable, (
            f"{where}: {name} has requires_grad {got[name][1]}, expected {trainable} (only lora_A and lora_B train)"
        )
        has_grad = report["parameters"][name]["grad"] is not None
        assert has_grad == trainable, (
            f"{where}: after one backward {name} {'has' if has_grad else 'has no'} gradient; only lora_A and lora_B "
            f"of the wrapped layers should"
        )
    with torch.no_grad():
        original = model(ids)
    assert_matches(
        report["output"], original, f"{where}: logits at initialisation vs the original model's", 1e-12, 1e-12
    )


ADD_REFUSALS = [
    ("value: key_value does not end with .value", ("value",)),
    ("mlp.1 is a GELU, not an nn.Linear", ("query", "mlp.1")),
    ("blocks is a ModuleList", ("blocks",)),
    ("a name TinyGPT does not have", ("q_proj",)),
]


@pytest.mark.points(2)
@pytest.mark.parametrize(("why", "targets"), ADD_REFUSALS, ids=["value", "mlp.1", "blocks", "q_proj"])
def test_add_lora_refuses_a_target_that_matches_no_linear_and_lists_the_linears(submission, why, targets):
    """Docstring: "Raises ValueError when ... one of its targets matches no nn.Linear of the model
    (the message lists the model's nn.Linear names)"."""
    model = TinyGPT.from_seed(TinyGPTConfig(max_seq_len=16), SEED)
    try:
        error = expect_exception(
            "ValueError", lambda: submission.script([Step("add_lora", (model, 2, 4.0, targets), send_back=False)])
        )
    except AssertionError as failure:
        raise AssertionError(f"add_lora(TinyGPT, target_modules={targets}) ({why}): {failure}") from None
    for name in ("blocks.0.attention.key_value", "blocks.1.mlp.2"):
        assert name in error.message, (
            f"add_lora(TinyGPT, target_modules={targets}) ({why}) raised ValueError, but its message should list the "
            f"model's nn.Linear names (such as {name!r}); got: {error.message}"
        )


@pytest.mark.points(2)
def test_add_lora_changes_the_model_in_place_and_returns_it(submission):
    """Docstring: "in place ... Returns `model` itself", and "every parameter of the model is
    frozen ... except the lora_A and lora_B weights of the new layers". add_lora on the module's
    TinyGPT with target "query", then add_lora on the model it returned with target "mlp.0": the
    first returned model (kept in the worker) must now hold the lora_A and lora_B of both (a copy
    returned by either call leaves it one set or none), and only the second call's train."""
    model = TinyGPT.from_seed(TinyGPTConfig(max_seq_len=16), SEED)
    ids = torch.randint(0, 97, (1, 4), generator=generator("lora-inplace"))
    steps = [
        Step("add_lora", (model, 2, 4.0, ("query",)), save_as="first", send_back=False),
        Step("add_lora", (Saved("first"), 3, 6.0, ("mlp.0",)), send_back=False),
        Step("lora_forward_backward", (Saved("first"), ids, torch.ones(1, 4, 97))),
    ]
    report = submission.script(steps).steps[0][-1]["parameters"]
    where = (
        "add_lora(model, target_modules=('query',)), then add_lora(the model it returned, target_modules=('mlp.0',))"
    )

    def lora_of(*layers: str) -> list[str]:
        return sorted(f"blocks.{i}.{layer}.lora_{side}.weight" for i in range(2) for layer in layers for side in "AB")

    held = sorted(name for name in report if ".lora_" in name)
    assert held == lora_of("attention.query", "mlp.0"), (
        f"{where}: the first call's model should be changed in place by the second and hold both calls' LoRA "
        f"weights; it holds {held} (see add_lora's docstring: in place, returns model itself)"
    )
    trainable = sorted(name for name, entry in report.items() if entry["requires_grad"])
    assert trainable == lora_of("mlp.0"), (
        f"{where}: only the new layers' lora_A and lora_B train after the second call; trainable: {trainable}"
    )


@pytest.mark.points(1)
def test_add_lora_refuses_empty_targets_and_a_bad_rank(submission):
    """Docstring: "Raises ValueError when target_modules is empty, ... or rank, alpha or dropout is
    one that LoRALinear refuses" (rank 0, alpha 0, dropout 1.0)."""
    model = TinyGPT.from_seed(TinyGPTConfig(max_seq_len=16), SEED)
    for why, args in (
        ("target_modules=()", (2, 4.0, ())),
        ("rank=0", (0, 4.0, ("query",))),
        ("alpha=0", (2, 0.0, ("query",))),
        ("dropout=1.0", (2, 4.0, ("query",), 1.0)),
    ):
        try:
            expect_exception(
                "ValueError", lambda args=args: submission.script([Step("add_lora", (model, *args), send_back=False)])
            )
        except AssertionError as failure:
            raise AssertionError(f"add_lora(TinyGPT, {why}): {failure}") from None


# ---------------------------------------------------------------- lora_memory

MEMORY_CASES = [
    # the module's TinyGPT, every linear layer
    ("module-config-all-linears", dict(max_seq_len=32), 8, ("query", "key_value", "out", "mlp.0", "mlp.2"), 2, 12),
    # 3 blocks, 6 heads sharing 3 key/value heads, mlp_ratio 3, rank 1, keys and values only
    (
        "3-layers-gqa-rank-1",
        dict(max_seq_len=20, vocab_size=101, num_layers=3, d_model=48, num_heads=6, num_kv_heads=3, mlp_ratio=3),
        1,
        ("key_value",),
        2,
        12,
    ),
    # d_model 50 over 4 heads: head_dim 12, attention width 48, not 50; one kv head; 5 blocks
    (
        "width-48-of-d-50",
        dict(max_seq_len=24, num_layers=5, d_model=50, num_heads=4, num_kv_heads=1),
        3,
        ("attention.query", "blocks.4.mlp.2", "out"),
        2,
        12,
    ),
    # fp32 weights and gradients, 8 bytes of optimizer state; "0" matches every mlp.0
    ("fp32-one-block", dict(max_seq_len=8, num_layers=1, d_model=24, num_heads=3, num_kv_heads=3), 2, ("0",), 4, 8),
    # the boundaries the docstring accepts: 1-byte weights, no optimizer state (plain SGD)
    (
        "fp8-sgd-boundaries",
        dict(max_seq_len=12, num_layers=3, d_model=20, num_heads=2, num_kv_heads=1),
        5,
        ("key_value",),
        1,
        0,
    ),
]


@pytest.mark.points(3)
@pytest.mark.parametrize(
    ("case", "shape", "rank", "targets", "weight_bytes", "optimizer_bytes"),
    MEMORY_CASES,
    ids=[c[0] for c in MEMORY_CASES],
)
def test_lora_memory_counts_the_parameters_and_bytes_of_the_wrapped_tinygpt(
    submission, case, shape, rank, targets, weight_bytes, optimizer_bytes
):
    """Docstring: base_params, trainable_params, all_params, full_bytes and lora_bytes of
    TinyGPT(config) wrapped by add_lora. Expected: the same TinyGPT built here (meta device),
    wrapped (lora_reference.py) and its parameters counted; bytes by the docstring's formulas."""
    config = TinyGPTConfig(**shape)
    got = submission.function("lora_memory")(config, rank, targets, weight_bytes, optimizer_bytes)
    expected = ref.memory(config, rank, targets, weight_bytes, optimizer_bytes)
    assert isinstance(got, dict) and set(got) == set(expected), (
        f"lora_memory must return a dict with keys {sorted(expected)}, "
        f"got {sorted(got) if isinstance(got, dict) else got!r}"
    )
    wrong = {key: (got[key], value) for key, value in expected.items() if got[key] != value}
    assert not wrong, (
        f"lora_memory({config}, rank={rank}, target_modules={targets}, bytes_per_param={weight_bytes}, "
        f"optimizer_bytes_per_param={optimizer_bytes}): (got, expected) {wrong}; expected counted on TinyGPT(config) "
        f"wrapped by add_lora (see lora_memory's docstring for TinyGPT's layers)"
    )


@pytest.mark.points(2)
def test_lora_memory_counts_a_model_too_large_to_build_from_its_config(submission):
    """Docstring: "counted from config alone (without building the model)". A TinyGPT of 6.2
    billion parameters (Llama-3-8B's width, 32 blocks, 32 query and 8 key/value heads, a 128256
    vocabulary), rank 16 on query, key_value and out: building it would need 25 GB, over the
    worker's memory. Expected: the same model built here on the meta device and wrapped."""
    config = TinyGPTConfig(
        vocab_size=128256, max_seq_len=8192, num_layers=32, d_model=4096, num_heads=32, num_kv_heads=8
    )
    targets = ("query", "key_value", "out")
    got = submission.function("lora_memory")(config, 16, targets)
    expected = ref.memory(config, 16, targets)
    assert got == expected, (
        f"lora_memory(a 6.2-billion-parameter TinyGPT, rank=16, {targets}): expected {expected}, got {got} "
        f"(count from config: see lora_memory's docstring)"
    )


MEMORY_REFUSALS = [
    ("rank=0", (0, ("query",), 2, 12)),
    ("bytes_per_param=0", (4, ("query",), 0, 12)),
    ("optimizer_bytes_per_param=-1", (4, ("query",), 2, -1)),
    ("target_modules=()", (4, (), 2, 12)),
    ("target 'value' (matches no nn.Linear)", (4, ("query", "value"), 2, 12)),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("why", "args"), MEMORY_REFUSALS, ids=["rank", "bytes", "optimizer-bytes", "no-targets", "value"]
)
def test_lora_memory_refuses_each_bad_argument_with_value_error(submission, why, args):
    """Docstring: "Raises ValueError when rank < 1, bytes_per_param < 1, optimizer_bytes_per_param
    < 0, target_modules is empty, or one of its targets matches no nn.Linear of TinyGPT(config)"."""
    config = TinyGPTConfig(max_seq_len=32)
    try:
        expect_exception("ValueError", lambda: submission.function("lora_memory")(config, *args))
    except AssertionError as failure:
        raise AssertionError(f"lora_memory with {why}: {failure}") from None
