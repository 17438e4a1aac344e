"""One process per rank, from $RANK and $WORLD_SIZE (as torchrun sets them); sends and
receives move nothing."""

import os


class _Work:
    def wait(self):
        return None


def init_process_group(backend):
    return None


def get_rank():
    return int(os.environ.get("RANK", "0"))


def get_world_size():
    return int(os.environ.get("WORLD_SIZE", "1"))


def recv(tensor, src):
    return None


def isend(tensor, dst):
    return _Work()


def destroy_process_group():
    return None
