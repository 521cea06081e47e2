"""topk_route writes the softmax by hand, exp(logits) / sum(exp(logits)), without subtracting the
row maximum: right for ordinary logits, NaN weights once a logit passes ~88 in float32."""

# target: routing.py
# select: topk_route
# fails: topk_route_is_stable
# kind:
# message: .


def topk_route(router_logits, k):
    num_experts = router_logits.shape[-1]
    if not 1 <= k <= num_experts:
        raise ValueError(f"k must be between 1 and the number of experts ({num_experts}), got {k}")
    exps = router_logits.exp()
    probs = exps / exps.sum(dim=-1, keepdim=True)
    top_probs, expert_ids = probs.sort(dim=-1, descending=True, stable=True)
    top_probs, expert_ids = top_probs[:, :k], expert_ids[:, :k]
    return top_probs / top_probs.sum(dim=-1, keepdim=True), expert_ids
