"""train_with_restarts torch.saves each checkpoint straight to its final name, step_NNNNNN.pt:
right on every run where no worker dies inside torch.save, but a writer killed there leaves a
partial file that the restarted run loads as the latest checkpoint."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: restart.py
# select: written_under_its_own_name
# fails: test_a_checkpoint_file_is_never_written_under_its_own_name
# kind:
# message: were written under their own names


def train_with_restarts(checkpoint_dir, steps, every):
    if steps < 1 or every < 1:
        raise ValueError(f"steps and every must be >= 1, not {steps} and {every}")
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    folder = Path(checkpoint_dir)
    model = make_model()
    optimizer = make_optimizer(model)
    start = 0
    complete = sorted(folder.glob("step_[0-9][0-9][0-9][0-9][0-9][0-9].pt"))
    if complete:
        state = torch.load(complete[-1], weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["next_step"]
    for step in range(start, steps):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        (model(x) - y).square().mean().backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= world
        optimizer.step()
        if (step + 1) % every == 0:
            if rank == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "next_step": step + 1}
                torch.save(state, folder / f"step_{step + 1:06d}.pt")  # in place: partial if killed now
            dist.barrier()
    return model.state_dict()
