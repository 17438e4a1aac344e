"""No CUDA here."""


def is_available() -> bool:
    return False


def set_device(index) -> None:
    return None


def synchronize() -> None:
    return None
