"""Training that survives a killed worker: resume from the last complete checkpoint under
torchrun's elastic agent (lecture 14-reliability, section 7).

Run on every worker by

    torchrun --standalone --nproc-per-node=2 --max-restarts=2 -m restart CHECKPOINT_DIR STEPS EVERY

(--standalone: one node, a c10d rendezvous on a free localhost port with a run id of its own.)

torchrun starts the workers with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
TORCHELASTIC_RESTART_COUNT in their environment. When one worker dies (the grader kills one with
SIGKILL mid-run), the agent stops the others and starts them all again, up to --max-restarts
times: the new workers know nothing but what is on disk.

Everything that decides the numbers is given and deterministic: the model (`make_model`, float64),
the optimizer (`make_optimizer`, SGD with momentum: it has state), and the data loader's batch
for a step (`batch`, which takes a moment, as reading a batch from storage does): so a run that
was killed and resumed ends with exactly the parameters of one that was not, if and only if the
checkpoint holds the model, the optimizer's state and the position in the data.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

FEATURES = 8
BATCH = 4
BATCH_PAUSE_S = 0.05  # a batch takes a moment to read, as from storage: the job runs long enough to be killed


def make_model() -> torch.nn.Module:
    """The model every worker starts from: the same on every rank and in every restart."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum: the momentum buffers are state that a checkpoint must hold."""
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data loader: rank `rank`'s batch for step `step` (inputs, targets), float64."""
    time.sleep(BATCH_PAUSE_S)
    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(BATCH, FEATURES, generator=generator, dtype=torch.float64)
    return x, x.sum(dim=1, keepdim=True).sin()


def train_with_restarts(checkpoint_dir: str, steps: int, every: int) -> dict[str, torch.Tensor]:
    """Train make_model() for `steps` steps of data parallelism on the torchrun world, resuming
    from the last complete checkpoint in `checkpoint_dir` if there is one; return the final
    parameters (the model's state_dict).

    Joins the process group from torchrun's environment (`dist.init_process_group("gloo")`)
    unless it is already joined. Step s, on every rank: forward and backward on batch(s, rank)
    with the loss mean((model(x) - y)^2); the gradients all-reduced and divided by the world size
    (so every rank holds the same average); one step of make_optimizer's optimizer.

    Checkpoints: after every step s with (s + 1) % every == 0, rank 0 writes
    `checkpoint_dir/step_{s + 1:06d}.pt` with torch.save of {"model": the model's state_dict,
    "optimizer": the optimizer's state_dict, "next_step": s + 1} (the data loader's position:
    the next step's batch), completely or not at all (written aside, then renamed), and every
    rank waits for it (a barrier) before the next step. The last complete checkpoint is the one
    with the largest next_step; a file whose name does not match, a partial one, is ignored.

    On a restart every rank loads that checkpoint (model, optimizer and position) and goes on
    from its next_step, so that the final parameters equal those of a run never interrupted,
    bit for bit. Raises ValueError for steps < 1 or every < 1.
    """
    ### BEGIN SOLUTION
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
    if complete:  # the names sort by step: the last is the latest
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
                aside = folder / f".step_{step + 1:06d}.partial"
                torch.save(state, aside)
                os.replace(aside, folder / f"step_{step + 1:06d}.pt")  # whole or absent
            dist.barrier()
    return model.state_dict()
    ### END SOLUTION


def _worker_main() -> None:
    """What torchrun runs on each worker (`-m restart DIR STEPS EVERY`): note this worker, train,
    and let rank 0 leave the final parameters for the launcher."""
    checkpoint_dir, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    marker = Path(checkpoint_dir) / "workers" / f"restart{restart}_rank{os.environ['RANK']}_pid{os.getpid()}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    _join(int(restart))
    final = train_with_restarts(checkpoint_dir, steps, every)
    if dist.get_rank() == 0:
        torch.save(final, Path(checkpoint_dir) / "workers" / "final.pt")
    dist.destroy_process_group()


def _join(restart: int) -> None:
    """Join the process group through torchrun's store, under a prefix of this round's own. The
    store outlives a round: without the prefix, a restarted worker can read the address its dead
    peer published in the round before, and connect to nobody (gloo: "Connection refused")."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    hosted_by_agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=rank == 0 and not hosted_by_agent)  # fmt: skip
    dist.init_process_group("gloo", store=dist.PrefixStore(f"round{restart}", store), rank=rank, world_size=world)


def run_under_torchrun(checkpoint_dir: str, steps: int, every: int, kill_after: int) -> dict[str, Any]:
    """For the grader: run train_with_restarts on 2 workers under a real torchrun (--standalone,
    --max-restarts=2); once the checkpoint of step `kill_after` exists (kill_after > 0), SIGKILL
    rank 1's worker. Returns the final parameters, the workers seen (restart, rank, pid) and
    torchrun's exit status.

    --standalone lets the store take a free port as it binds it, and gives the rendezvous a run
    id of its own. A port chosen beforehand (bound, released, then passed to torchrun) can be
    taken by another torchrun meanwhile, and an agent whose store cannot bind its port connects
    to the store already there: with the default run id "none" it joins that job's rendezvous,
    as a redundant node, and leaves when that job closes it (RendezvousGracefulExitError, then
    torch's launcher fails on the agent's None result), or fails when that store goes away."""
    folder = Path(checkpoint_dir)
    here = str(Path(__file__).resolve().parent)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=2",
               "-m", "restart", str(folder), str(steps), str(every)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": here + os.pathsep + os.environ.get("PYTHONPATH", "")}
    killed = None
    (folder / "workers").mkdir(parents=True, exist_ok=True)
    # torchrun's own files (its log folder) go beside the run's, not to the worker's TMPDIR
    env["TMPDIR"] = str(folder / "workers")
    with open(folder / "workers" / "torchrun.log", "w+b") as log:
        with subprocess.Popen(command, cwd=here, env=env, stdout=log, stderr=log) as agent:
            while agent.poll() is None:
                if killed is None and kill_after > 0 and (folder / f"step_{kill_after:06d}.pt").exists():
                    victims = list((folder / "workers").glob("restart0_rank1_pid*"))
                    if victims:
                        killed = int(victims[0].name.rpartition("pid")[2])
                        os.kill(killed, signal.SIGKILL)
                time.sleep(0.01)
        log.seek(0)
        printed = log.read().decode(errors="replace")
    workers = sorted(
        tuple(map(int, re.fullmatch(r"restart(\d+)_rank(\d+)_pid(\d+)", marker.name).groups()))
        for marker in (folder / "workers").glob("restart*_rank*_pid*")
    )
    final = folder / "workers" / "final.pt"
    return {
        "returncode": agent.returncode,
        "killed_pid": killed,
        "workers": workers,
        "final": torch.load(final, weights_only=True) if final.exists() else None,
        "log": printed[-3000:],
    }


if __name__ == "__main__":
    _worker_main()
