"""An optimizer that does nothing."""


class SGD:
    def __init__(self, params, lr):
        self.lr = lr

    def step(self):
        return None

    def zero_grad(self):
        return None
