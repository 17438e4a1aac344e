"""Pipeline-parallel training whose GPU clocks follow an eopt schedule, per microbatch.

One pipeline stage per rank, 1F1B order, activations and gradients sent between
neighbouring ranks. Each rank controls only its own GPU; the runtime controller switches
its clocks at every element of the schedule (forward and backward of each microbatch, and
the demo plans' gradient all-reduce). Run it with the schedule of a pipeline plan with one
stage per rank, for example the demo's:

    eopt demo --out demo --stages 2 --microbatches 4
    torchrun --nproc-per-node 2 docs/pytorch_1f1b.py demo/schedule.json
    # no GPU: gloo on the CPU and simulated GPUs (what eopt's tests run)
    torchrun --nproc-per-node 2 docs/pytorch_1f1b.py demo/schedule.json --backend sim
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
import torch.distributed as dist

from eopt.apply import RuntimeController
from eopt.model.schedule import read_schedule
from eopt.plan.pipeline import stage_steps

WIDTH, BATCH = 32, 8  # each stage: one Linear + ReLU of WIDTH features; BATCH rows a microbatch


def main() -> None:
    parser = argparse.ArgumentParser(description="1F1B training with eopt's clocks")
    parser.add_argument("schedule", help="schedule.json from eopt solve or eopt demo")
    parser.add_argument(
        "--backend",
        choices=["nvml", "sim"],
        default="nvml",
        help="nvml: the real GPUs (an error where NVML cannot control them); sim: simulated",
    )
    parser.add_argument("--steps", type=int, default=3, help="training iterations")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    stage, stages = dist.get_rank(), dist.get_world_size()  # one stage per rank
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    first, last = stage == 0, stage == stages - 1

    schedule = read_schedule(args.schedule)
    plan_device = f"stage{stage}"  # the plan's name of this rank's GPU
    microbatches = sum(e.name.startswith("F[") for e in schedule.elements_on(plan_device))
    # The GPU this rank runs on, as CUDA numbers it in this process. eopt maps the CUDA
    # ordinal to the physical GPU (CUDA_VISIBLE_DEVICES honoured); a UUID works too.
    gpu = torch.cuda.current_device() if cuda else local_rank

    torch.manual_seed(stage)
    layer = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(0)  # every rank draws the same microbatches
    inputs_0 = [torch.randn(BATCH, WIDTH, generator=data) for _ in range(microbatches)]
    targets = [x.flip(1).relu() for x in inputs_0]

    with RuntimeController.from_schedule(
        schedule,
        only=[plan_device],  # this rank's GPU only
        gpu_map={plan_device: gpu},
        backend=args.backend,
    ) as ctl:
        for step in range(args.steps):
            inputs, outputs, sends = {}, {}, []
            loss_sum = 0.0
            for kind, m, name in stage_steps(stage, stages, microbatches):
                with ctl.element(name):  # switches this GPU to the element's clocks
                    if kind == "forward":
                        if first:
                            x = inputs_0[m].to(device)
                        else:
                            x = torch.empty(BATCH, WIDTH, device=device)
                            dist.recv(x, src=stage - 1)
                            x.requires_grad_()
                        inputs[m], outputs[m] = x, layer(x)
                        if not last:
                            act = outputs[m].detach()
                            sends.append((act, dist.isend(act, dst=stage + 1)))
                    else:
                        if last:
                            target = targets[m].to(device)
                            loss = torch.nn.functional.mse_loss(outputs[m], target)
                            (loss / microbatches).backward()
                            loss_sum += loss.item()
                        else:
                            grad = torch.empty(BATCH, WIDTH, device=device)
                            dist.recv(grad, src=stage + 1)
                            outputs[m].backward(grad)  # microbatch m's own output
                        if not first:
                            sends.append(
                                (inputs[m].grad, dist.isend(inputs[m].grad, dst=stage - 1))
                            )
            # The demo's plans end each stage with its gradient all-reduce, AR[s…]: entering
            # it sets the clock the all-reduce (with data parallelism) and the optimizer run
            # at, instead of leaving them at the last backward's clock.
            tail = f"AR[s{stage}]"
            with ctl.element(tail) if tail in ctl else contextlib.nullcontext():
                for _, work in sends:
                    work.wait()
                optimizer.step()
                optimizer.zero_grad()
            if last:
                print(f"step {step}: loss {loss_sum / microbatches:.4f}", flush=True)

    print(f"rank {stage} ({plan_device}): {ctl.stats().summary()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
