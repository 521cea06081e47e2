"""Hidden suite: the Scheduler against sequential generation, request by request.

The simple model is one request alone run through the given TinyGPT (float64) on its whole
sequence every step (serving_reference.sequential): whatever the batching, chunking, preemption
and prefix reuse, every request must get exactly those tokens (greedy, or sampled with its own
seeded generator). Workloads are drawn by Hypothesis (random arrivals between steps, prompts
longer than the token budget, caches so small that requests are preempted, prompts that share
prefixes, requests too large for the cache) and each runs in one worker call; the grader also
reads every step's batch (the given trace_steps) and the model's own counters (forward calls,
tokens computed), so the token budget and "one forward per step" are checked as well.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from grader.sandbox import Saved, Step, SubmissionError
from grader.suites.serving.serving_reference import CONFIG, MODEL_SEED, model, scheduler_script, sequential
from grader.testing import expect_exception, generator

VOCAB = CONFIG["vocab_size"]


def _tokens(length: int, *salt: object) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=generator("serving-tokens", length, *salt)).tolist()


def _shown(events: list[tuple]) -> str:
    shown = []
    for event in events:
        if event[0] == "add":
            extra = f", T={event[4]}, seed={event[5]}" if len(event) > 4 and event[4] else ""
            shown.append(f"add_request({event[1]!r}, prompt of {len(event[2])}, max_new_tokens={event[3]}{extra})")
        else:
            shown.append("step()")
    return "; ".join(shown)


def too_large(prompt: list[int], new: int, blocks: int, block_size: int) -> bool:
    return math.ceil((len(prompt) + new - 1) / block_size) > blocks


def run_workload(
    submission, blocks: int, block_size: int, budget: int, events: list[tuple], config: dict = CONFIG
) -> dict:
    """Play the workload in one worker call and check it against sequential generation; return
    what was observed (the trace of steps, the outputs, the model's counters)."""
    results = submission.script(scheduler_script(blocks, block_size, budget, events, config=config)).steps[0]
    where = f"(Scheduler(num_blocks={blocks}, block_size={block_size}, max_batch_tokens={budget}); {_shown(events)})"
    replies = iter(results[2:])
    net, accepted, explicit_steps = model(config=config), {}, []
    for event in events:
        reply = next(replies)
        if event[0] == "step":
            explicit_steps.append(reply)
        if event[0] != "add":
            continue
        request_id, prompt, new = event[1:4]
        refuse = request_id in accepted or too_large(prompt, new, blocks, block_size)
        if refuse:
            assert reply[0] == "error" and reply[1] == "ValueError", (
                f"add_request({request_id!r}, ...) should raise ValueError (a duplicate id, or a request larger "
                f"than the whole cache), got {reply[1] if reply[0] == 'error' else 'success'} {where}"
            )
        else:
            assert reply[0] == "ok", f"add_request({request_id!r}, ...) raised {reply[1]}: {reply[2]} {where}"
            accepted[request_id] = event
    _, trace, outputs, counts = next(replies), next(replies), next(replies), next(replies)
    batches = [b for b in explicit_steps if b] + list(trace)
    for batch in batches:
        entries = [tuple(entry) for entry in batch]
        total = sum(n for _, n in entries)
        assert total <= budget, f"a step computed {total} tokens, over max_batch_tokens={budget}: {entries} {where}"
        assert all(n >= 1 and r in accepted for r, n in entries), f"a step returned {entries} {where}"
        assert len({r for r, _ in entries}) == len(entries), f"a request appears twice in one step: {entries} {where}"
    assert counts["forward_calls"] == len(batches), (
        f"{len(batches)} steps ran a batch but model.forward was called {counts['forward_calls']} times: one "
        f"forward per step {where}"
    )
    computed = sum(n for batch in batches for _, n in batch)
    assert counts["tokens_computed"] == computed, (
        f"the steps report {computed} tokens computed, model.forward computed {counts['tokens_computed']} {where}"
    )
    assert set(outputs) == set(accepted), (
        f"run_until_done returned requests {sorted(outputs, key=str)}, expected {sorted(accepted, key=str)} {where}"
    )
    for request_id, event in accepted.items():
        expected = sequential(net, *event[2:])
        got = list(outputs[request_id])
        assert got == expected, (
            f"request {request_id!r} generated {got}, one request alone generates {expected} {where}"
        )
    check_logits(net, accepted, outputs, counts["logits"], where)
    return {"batches": batches, "outputs": outputs, "counts": counts}


def check_logits(net, accepted: dict, outputs: dict, logits: list, where: str) -> None:
    """Every logits row the model returned (ServingModel records them with the sequence's length
    after the call) equals, to 1e-9, the logits one request alone gets after the same tokens. The
    tokens can agree while the logits do not (a random TinyGPT often repeats one token whatever
    its context): keys and values from the wrong context are caught here."""
    with torch.no_grad():
        for request_id, length, row in logits:
            event = accepted[request_id]
            tokens = list(event[2]) + list(outputs[request_id])
            want = net(torch.tensor([tokens[:length]]))[0, -1]
            worst = (torch.as_tensor(row) - want).abs().max().item()
            assert worst <= 1e-9, (
                f"request {request_id!r}: the logits after its first {length} tokens differ from one request "
                f"alone by up to {worst:.3g}: the cache holds keys or values from another context for its past "
                f"(a block adopted from the prefix cache must follow the same chain of tokens) {where}"
            )


def computed_per_request(batches: list) -> dict:
    """Tokens each request computed over the steps (the (request_id, tokens) entries of the batches)."""
    computed: dict = {}
    for batch in batches:
        for request_id, n in batch:
            computed[request_id] = computed.get(request_id, 0) + n
    return computed


@st.composite
def workloads(draw: st.DrawFn) -> tuple[int, int, int, list[tuple]]:
    """Small caches and budgets; prompts that share prefixes of up to 9 tokens, and one block of
    tokens that recurs after different prefixes; arrivals between steps; sometimes sampling, a
    duplicate id or a request larger than the cache."""
    block_size = draw(st.sampled_from([2, 3, 4]), label="block_size")
    blocks = draw(st.integers(3, 12), label="num_blocks")
    budget = draw(st.integers(2, 16), label="max_batch_tokens")
    prefixes = [_tokens(9, "prefix", i, block_size, blocks, budget) for i in range(2)]
    recurring = _tokens(block_size, "recurring", block_size)  # one block of tokens, after different prefixes
    events: list[tuple] = [("step",)] * draw(st.integers(0, 1))
    for request_id in range(draw(st.integers(1, 5), label="requests")):
        shared = draw(st.sampled_from([[], *prefixes]))[: draw(st.integers(0, 9))]
        if draw(st.booleans(), label="recurring block"):  # cached blocks are keyed by their whole chain
            shared = shared[: len(shared) // block_size * block_size] + recurring
        suffix = draw(st.lists(st.integers(0, VOCAB - 1), min_size=0 if shared else 1, max_size=7))
        new = draw(st.integers(1, 6))
        temperature = draw(st.sampled_from([0.0, 0.0, 1.5]))
        same_id = draw(st.integers(0, 9)) == 0 and request_id > 0
        events.append(("add", request_id - 1 if same_id else request_id, shared + suffix, new, temperature, request_id))
        events += [("step",)] * draw(st.integers(0, 3))
    return blocks, block_size, budget, events


@pytest.mark.points(16)
def test_scheduler_outputs_equal_sequential_generation_under_random_workloads(submission):
    """Hypothesis: 25 workloads, each in one worker call, compared with sequential generation,
    after a fixed one that the draw may miss: request 1 starts with the block that follows
    another block in request 0 (cached in that context, so a key without the chain adopts it)."""
    first, recurring = _tokens(3, "fixed-first"), _tokens(3, "fixed-recurring")
    fixed = (8, 3, 16, [("add", 0, [*first, *recurring, 5], 3), ("step",), ("step",), ("add", 1, [*recurring, 9], 3)])

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    @given(workload=workloads())
    @example(workload=fixed)
    def random_workloads(workload: tuple) -> None:
        run_workload(submission, *workload)

    random_workloads()


@pytest.mark.points(4)
def test_prompts_longer_than_the_budget_are_prefilled_in_chunks_oldest_first(submission):
    """Budget 4: request 0 (prompt 11) takes 4 + 4 + 3 tokens over three steps; request 1
    (prompt 2) joins when budget is left, decodes run before new prefill chunks."""
    events = [("add", 0, _tokens(11, "chunk-0"), 3), ("add", 1, _tokens(2, "chunk-1"), 2)]
    seen = run_workload(submission, 16, 4, 4, events)
    expected = [[(0, 4)], [(0, 4)], [(0, 3), (1, 1)], [(0, 1), (1, 1)], [(0, 1), (1, 1)]]
    got = [[tuple(e) for e in batch] for batch in seen["batches"]]
    assert got == expected, (
        f"with max_batch_tokens=4 the steps should be {expected} (running requests first, oldest first, each "
        f"taking min(uncomputed tokens, budget left); then waiting ones), got {got}"
    )


@pytest.mark.points(2)
def test_each_running_request_gets_a_token_while_budget_is_left(submission):
    """Budget 2, two requests of one prompt token and 3 new tokens: each step computes both (the
    first takes 1 token, 1 is left for the second), not the first alone."""
    events = [("add", 0, _tokens(1, "share-budget", 0), 3), ("add", 1, _tokens(1, "share-budget", 1), 3)]
    seen = run_workload(submission, 8, 4, 2, events)
    got = [[tuple(e) for e in batch] for batch in seen["batches"]]
    expected = [[(0, 1), (1, 1)]] * 3
    assert got == expected, (
        f"with max_batch_tokens=2 and two requests of 1 prompt token and 3 new tokens the steps should be "
        f"{expected}: every running request takes min(its uncomputed tokens, budget left) while budget is left "
        f"(after the first request's 1 token, 1 is left for the second); got {got}"
    )


@pytest.mark.points(1)
def test_a_budget_of_one_token_is_allowed_and_computes_one_token_per_step(submission):
    """max_batch_tokens=1 is the smallest valid budget: a prompt of 3 tokens and 2 new tokens take
    4 steps of one token (3 prompt chunks, then 1 decode)."""
    prompt = _tokens(3, "budget-one")
    steps = [
        Step("build_model", (CONFIG, MODEL_SEED, "float64"), save_as="model", send_back=False),
        Step("Scheduler", (Saved("model"), 4, 4, 1), save_as="scheduler", send_back=False),
        Step("call_or_error", (Saved("scheduler"), "add_request", 0, prompt, 2)),
        Step("trace_steps", (Saved("scheduler"), 100)),
        Step("model.counts"),
    ]
    try:
        added, trace, counts = submission.script(steps).steps[0][2:]
    except SubmissionError as error:
        if error.kind != "exception" or error.step != 1:
            raise
        raise AssertionError(
            f"Scheduler(model, 4, 4, max_batch_tokens=1) raised {error.exception_type}: a budget of 1 token is "
            f"valid (only max_batch_tokens < 1 is refused): {error.message}"
        ) from None
    assert added[0] == "ok", f"add_request(0, prompt of 3, max_new_tokens=2) raised {added[1]}: {added[2]}"
    got, expected = [[tuple(e) for e in batch] for batch in trace], [[(0, 1)]] * 4
    assert got == expected, (
        f"with max_batch_tokens=1 a prompt of 3 tokens and 2 new tokens should take the steps {expected} "
        f"(each step min(uncomputed tokens, budget left) = 1 token; the last decode is the 4th), got {got}"
    )
    net = model()
    check_logits(net, {0: ("add", 0, prompt, 2)}, {0: sequential(net, prompt, 1)}, counts["logits"], "(budget 1)")


@pytest.mark.points(3)
def test_a_newer_request_is_not_admitted_while_the_oldest_waiting_one_does_not_fit(submission):
    """4 blocks of 4 positions. Request 0 (prompt 8) runs and holds 3 blocks after its first
    decode; request 1 (prompt 9: a first chunk of 3 blocks) waits for blocks, and request 2
    (prompt 2: one block, which is free) arrived after it, so it waits too: the second step
    computes request 0's decode alone. Request 1 is admitted once request 0 has finished."""
    events = [
        ("add", 0, _tokens(8, "head-of-line", 0), 5),
        ("step",),
        ("add", 1, _tokens(9, "head-of-line", 1), 2),
        ("add", 2, _tokens(2, "head-of-line", 2), 2),
        ("step",),
    ]
    seen = run_workload(submission, 4, 4, 64, events)
    got = [[tuple(e) for e in batch] for batch in seen["batches"]]
    assert got[:2] == [[(0, 8)], [(0, 1)]], (
        f"the first two steps should be [(0, 8)] and [(0, 1)]: request 1 (the oldest waiting) needs 3 blocks for "
        f"its chunk and 1 is free, so no newer request is admitted before it, not even request 2 which would "
        f"fit; got {got[:2]}"
    )
    first = {
        request: next(i for i, batch in enumerate(got) if any(r == request for r, _ in batch)) for request in (1, 2)
    }
    assert first[1] <= first[2], f"request 2 was admitted at step {first[2]}, before request 1 (step {first[1]}): {got}"


@pytest.mark.points(4)
def test_preemption_under_few_blocks_keeps_every_output_and_recomputes(submission):
    """5 blocks of 2 positions for three requests of 3 + 6 tokens: they cannot all hold their
    blocks, so the newest are preempted and recomputed; outputs stay those of one request alone."""
    events = [("add", i, _tokens(3, "preempt", i), 6) for i in range(3)]
    seen = run_workload(submission, 5, 2, 16, events)
    without_preemption = 3 * (3 + 5)
    assert seen["counts"]["tokens_computed"] > without_preemption, (
        f"{seen['counts']['tokens_computed']} tokens computed; without preemption it would be {without_preemption}, "
        f"but 3 requests needing 4 blocks each cannot run together in 5 blocks"
    )


@pytest.mark.points(4)
def test_equal_requests_finish_in_arrival_order_under_preemption(submission):
    """Six requests of equal lengths in 7 blocks of 2: first come, first served means that each
    finishes no later than every request that arrived after it (preempt the newest, admit the oldest)."""
    events = [("add", i, _tokens(4, "fcfs", i), 5) for i in range(6)]
    seen = run_workload(submission, 7, 2, 6, events)
    last_step = {request: index for index, batch in enumerate(seen["batches"]) for request, _ in batch}
    order = [last_step[i] for i in range(6)]
    assert order == sorted(order), (
        f"requests 0..5 (equal lengths, added in order) finished at steps {order}; first come, first served "
        f"finishes them in arrival order"
    )


@pytest.mark.points(3)
def test_sampled_requests_use_their_own_seeded_generator(submission):
    """Temperature 3 (top probability about 0.3 here): each request draws from its own
    torch.Generator().manual_seed(seed), one multinomial per token, whatever runs beside it."""
    events = [("add", i, _tokens(3 + i, "sample", i), 8, 3.0, 100 + i) for i in range(3)]
    events.insert(1, ("step",))
    run_workload(submission, 12, 2, 5, events)


FLAT_CONFIG = {**CONFIG, "d_model": 4, "num_heads": 1, "num_kv_heads": 1}  # flat logits: sum p^2 about 0.15 at T=1


@pytest.mark.points(2)
def test_sampling_at_temperature_one_and_below_uses_the_seeded_generator(submission):
    """Every temperature > 0 samples with the request's own torch.Generator().manual_seed(seed),
    also T = 1 and T = 0.5. The course's model is so sure of itself at T <= 1 that any draw gives
    its argmax, so this runs a TinyGPT of d_model 4 (flat logits): there another generator (or
    torch's global one) gives other tokens."""
    events = [("add", 0, _tokens(4, "flat", 0), 10, 1.0, 7), ("add", 1, _tokens(5, "flat", 1), 10, 0.5, 8)]
    run_workload(submission, 16, 4, 16, events, config=FLAT_CONFIG)


@pytest.mark.points(4)
def test_bad_requests_are_refused_and_the_others_served(submission):
    """A request larger than the whole cache, an id added before (also once finished), an empty
    prompt and max_new_tokens 0 raise ValueError; the valid requests are all served."""
    big = _tokens(30, "big")  # ceil((30 + 2 - 1) / 4) = 8 blocks > 6
    events = [("add", "a", _tokens(5, "a"), 3), ("add", "big", big, 2), ("add", "a", _tokens(2, "a2"), 1)]
    events += [("add", "empty", [], 2), ("add", "zero", _tokens(3, "zero"), 0), ("add", "b", _tokens(4, "b"), 2)]
    events += [("step",)] * 6 + [("add", "b", _tokens(4, "b-again"), 1), ("add", "c", _tokens(6, "c"), 2)]
    results = submission.script(scheduler_script(6, 4, 8, events)).steps[0][2:]
    refused = {1: "a request needing 8 blocks in a cache of 6", 2: "a duplicate id", 3: "an empty prompt",
               4: "max_new_tokens=0", 12: "an id whose request has finished"}  # fmt: skip
    for index, what in refused.items():
        assert results[index][:2] == ("error", "ValueError"), (
            f"add_request with {what} should raise ValueError, got {results[index]}"
        )
    outputs, net = results[-2], model()
    expected = {"a": sequential(net, events[0][2], 3), "b": sequential(net, events[5][2], 2)}
    expected["c"] = sequential(net, events[13][2], 2)
    assert {k: list(v) for k, v in outputs.items()} == expected, (
        f"after refusing the bad requests, run_until_done should serve a, b and c as if alone: expected "
        f"{expected}, got {outputs}"
    )


@pytest.mark.points(2)
def test_a_request_that_fills_the_whole_cache_is_served_and_one_position_more_is_refused(submission):
    """6 blocks of 4 positions (24). Prompt 20 with 5 new tokens needs ceil((20 + 5 - 1) / 4) = 6
    blocks (the last new token is never computed): accepted and served as if alone. Prompt 20
    with 6 new tokens (25 positions) and prompt 25 with 1 (25) need 7: refused. The refusals
    come after the served request has finished, so that a request accepted by mistake is never run."""
    fits, longer = _tokens(20, "whole-cache"), _tokens(25, "whole-cache")
    steps = [
        Step("build_model", (CONFIG, MODEL_SEED, "float64"), save_as="model", send_back=False),
        Step("Scheduler", (Saved("model"), 6, 4, 32), save_as="scheduler", send_back=False),
        Step("call_or_error", (Saved("scheduler"), "add_request", "fits", fits, 5)),
        Step("trace_steps", (Saved("scheduler"),)),
        Step("scheduler.run_until_done"),
        Step("call_or_error", (Saved("scheduler"), "add_request", "new-too-many", fits, 6)),
        Step("call_or_error", (Saved("scheduler"), "add_request", "prompt-too-long", longer, 1)),
    ]
    added, trace, outputs, *refusals = submission.script(steps).steps[0][2:]
    assert added[0] == "ok", (
        f"add_request('fits', prompt of 20, max_new_tokens=5) in 6 blocks of 4 raised {added[1]}: {added[2]}; it "
        f"needs ceil((20 + 5 - 1) / 4) = 6 blocks, the whole cache, which is allowed (only > num_blocks is refused)"
    )
    expected = sequential(model(), fits, 5)
    assert list(outputs["fits"]) == expected, (
        f"the request that fills the whole cache generated {list(outputs['fits'])}, alone it generates {expected} "
        f"(trace {[list(batch) for batch in trace]})"
    )
    for (length, new), reply in zip([(20, 6), (25, 1)], refusals):
        assert tuple(reply[:2]) == ("error", "ValueError"), (
            f"add_request(prompt of {length}, max_new_tokens={new}) in 6 blocks of 4 positions should raise "
            f"ValueError: it needs ceil(({length} + {new} - 1) / 4) = 7 blocks, more than the whole cache; got {reply}"
        )


@pytest.mark.points(2)
def test_idle_step_returns_nothing_and_runs_no_forward(submission):
    steps = scheduler_script(4, 4, 8, [("step",), ("add", 0, [1, 2], 1), ("step",), ("step",)])
    results = submission.script(steps).steps[0][2:]
    assert list(results[0]) == [] and list(results[3]) == [], f"an idle step() must return [], got {results}"
    assert results[-1]["forward_calls"] == 1, (
        f"one request of 2 tokens and 1 new token needs one forward; got {results[-1]['forward_calls']} "
        f"(an idle step must not call the model)"
    )


@pytest.mark.points(1)
def test_a_budget_below_one_token_is_refused(submission):
    steps = [
        Step("build_model", (CONFIG, MODEL_SEED, "float64"), save_as="model", send_back=False),
        Step("Scheduler", (Saved("model"), 4, 4, 0)),
    ]
    expect_exception("ValueError", lambda: submission.script(steps))


@pytest.mark.points(3)
def test_a_fully_cached_prompt_still_computes_its_last_token(submission):
    """Block size 4: request 1 repeats request 0's 8-token prompt after it finished. Both blocks
    are cached, but at most (8 - 1) // 4 = 1 is adopted: the last token's logits are needed, so
    request 1 computes 4 prompt tokens (and 1 decode token), not 0 and not 8."""
    prompt = _tokens(8, "fully-cached")
    seen = run_workload(submission, 8, 4, 16, [("add", 0, prompt, 2), ("step",), ("step",), ("add", 1, prompt, 2)])
    second = seen["counts"]["tokens_computed"] - (8 + 1)
    assert second == 4 + 1, (
        f"the repeated prompt computed {second} tokens (prompt and decode); adopting (8 - 1) // 4 = 1 cached block "
        f"leaves 4 prompt tokens and 1 decode token: 5"
    )


@pytest.mark.points(3)
def test_a_block_is_reused_only_after_the_same_prefix(submission):
    """Block size 4: request 0 is X + Z + [t], request 1 is Z + X + [t] (the same blocks in the
    other order). Keys and values depend on everything before a position, so request 1 must not
    adopt request 0's blocks: a key of the block's own tokens alone would match Z, then X."""
    x, z = _tokens(4, "order-x"), _tokens(4, "order-z")
    events = [("add", 0, [*x, *z, 7], 3), ("step",), ("step",), ("add", 1, [*z, *x, 7], 3)]
    seen = run_workload(submission, 16, 4, 16, events)
    assert seen["counts"]["tokens_computed"] == 2 * (9 + 2), (
        f"{seen['counts']['tokens_computed']} tokens computed; no block of request 1 follows the same prefix as in "
        f"request 0, so both compute 9 + 2 tokens: key a block by (key of the block before it, its tokens)"
    )


@pytest.mark.points(2)
def test_a_prompt_one_token_past_cached_blocks_adopts_all_of_them(submission):
    """Block size 4: request 0 is X + Y + [1] and caches X and Y; request 1 is X + Y + [2] (9
    tokens): (9 - 1) // 4 = 2 blocks may be adopted, both match, so it computes its last prompt
    token and 1 decode token: 2 tokens. Y's key is (X's key, Y's own 4 tokens), whatever follows."""
    x, y = _tokens(4, "extend-x"), _tokens(4, "extend-y")
    seen = run_workload(
        submission, 8, 4, 16, [("add", 0, [*x, *y, 1], 2), ("step",), ("step",), ("add", 1, [*x, *y, 2], 2)]
    )
    computed = computed_per_request(seen["batches"])
    assert computed.get(1) == 2, (
        f"request 1 (X + Y + 1 token, X and Y cached by request 0) computed {computed.get(1)} tokens; it adopts "
        f"(9 - 1) // 4 = 2 blocks and computes 1 prompt token and 1 decode token: 2. Key a block by (key of the "
        f"block before it, the tuple of its own block_size tokens) and adopt up to (len(tokens) - 1) // block_size"
    )


@pytest.mark.points(3)
def test_eviction_releases_the_least_recently_used_block_and_a_chains_tail_first(submission):
    """6 blocks of 4. a1 = A + [1] caches A's 2 blocks, b1 = B + [2] caches B's, a2 = A + [3]
    adopts A's (a use: A is now more recent than B). 4 blocks cached, 2 free; `big` (10 tokens)
    needs 3: one cached block is released, the least recently used, B's second (of blocks used
    together, the later one of the chain first). So a3 = A + [4] adopts both of A's blocks (2
    tokens computed), b2 = B + [5] adopts B's first block (6 tokens: 5 prompt, 1 decode)."""
    a, b = _tokens(8, "lru-exact-a"), _tokens(8, "lru-exact-b")
    two_steps = [("step",), ("step",)]
    events = [("add", "a1", [*a, 1], 2), *two_steps, ("add", "b1", [*b, 2], 2), *two_steps]
    events += [("add", "a2", [*a, 3], 2), *two_steps, ("add", "big", _tokens(10, "lru-exact-big"), 2), *two_steps]
    events += [("add", "a3", [*a, 4], 2), *two_steps, ("add", "b2", [*b, 5], 2)]
    seen = run_workload(submission, 6, 4, 16, events)
    computed = computed_per_request(seen["batches"])
    expected = {"a1": 10, "b1": 10, "a2": 2, "big": 11, "a3": 2, "b2": 6}
    assert computed == expected, (
        f"tokens computed per request {computed}, expected {expected}: big needs 3 blocks with 2 free, so one "
        f"cached block is released, the least recently used (used: cached or adopted; A's blocks were adopted by "
        f"a2 after B's were cached), and of B's chain the later block first; a3 then adopts A's 2 blocks and b2 "
        f"B's first block"
    )
