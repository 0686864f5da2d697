"""Test-wide settings: DDS stays on this machine, CUDA-only tests skip without a GPU."""
import os

# Any test that starts DDS must not multicast off the machine; each run gets its own domain.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(40 + os.getpid() % 50))

import pytest  # noqa: E402


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda.is_available() is false on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread, as a runtime worker has: the CI machine is small and shared."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
