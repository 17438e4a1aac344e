"""Pipeline-parallel training marked for eopt: profile it, plan it, run it at its plan.

One pipeline stage per rank, 1F1B order, activations and gradients sent between
neighbouring ranks. Every forward and backward of each microbatch is one energy element,
marked with `eopt.element(name, kind=...)`; `eopt.step()` ends an iteration. The markers
do nothing unless eopt runs the program, so it trains as it is:

    torchrun --nproc-per-node 2 docs/pytorch_1f1b.py

and eopt runs the same file, unchanged, at every stage of the loop (docs/pytorch.md):

    eopt profile --clocks 1410,1200,1005 -o lib.jsonl -- torchrun --nproc-per-node 2 docs/pytorch_1f1b.py
    eopt plan pipeline --library lib.jsonl --stages 2 --microbatches 4 --idle-power 60W -o plan.yaml
    eopt solve plan.yaml --slowdown 5% -o schedule.json
    eopt apply schedule.json -o run.json -- torchrun --nproc-per-node 2 docs/pytorch_1f1b.py --steps 1
    eopt check schedule.json --measured run.json
"""  # noqa: E501

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

import eopt
from eopt.plan.pipeline import stage_steps

WIDTH, BATCH = 32, 8  # each stage: one Linear + ReLU of WIDTH features; BATCH rows a microbatch


def main() -> None:
    parser = argparse.ArgumentParser(description="1F1B training, marked for eopt")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches a step")
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
    microbatches = args.microbatches

    torch.manual_seed(stage)
    layer = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(0)  # every rank draws the same microbatches
    inputs_0 = [torch.randn(BATCH, WIDTH, generator=data) for _ in range(microbatches)]
    targets = [x.flip(1).relu() for x in inputs_0]

    for step in range(args.steps):
        inputs, outputs, sends = {}, {}, []
        loss_sum = 0.0
        # The plan's order and element names: F[s0,m0], B[s0,m0] … (eopt plan pipeline).
        for kind, m, name in stage_steps(stage, stages, microbatches):
            with eopt.element(name, kind=f"stage{stage}.{kind}"):
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
                        sends.append((inputs[m].grad, dist.isend(inputs[m].grad, dst=stage - 1)))
                if cuda:
                    torch.cuda.synchronize()  # the element ends when its GPU work does
        for _, work in sends:
            work.wait()
        optimizer.step()
        optimizer.zero_grad()
        eopt.step()
        if last:
            print(f"step {step}: loss {loss_sum / microbatches:.4f}", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
