"""Given code of module orchestration (read it): a GPU node as plain data, what nvidia-ctk reads
from NVML and from the driver before it writes the node's CDI spec (containers.cdi_spec).

    from grader.models.gpu_node import gpu_node
    node = gpu_node()                                   # 8 H100 GPUs, MIG off everywhere
    node = gpu_node(mig={7: ["3g.40gb", "3g.40gb"]})    # GPU 7 in MIG mode with two MIG devices
    node = gpu_node(4, product="NVIDIA-L40S", mig_capable=False, seed=3)

The node is a dict:

    {"driver_version": "550.90.07",
     "libraries": ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07", ...],
     "gpus": [{"index": 0, "uuid": "GPU-...", "minor": 0, "product": "NVIDIA-H100-80GB-HBM3",
               "mig_capable": True, "mig": None}, ...]}

- `index`: the NVML index (nvidia-smi's); `minor`: the minor number of /dev/nvidia<minor>. They are
  equal unless `minors` says otherwise (on real machines they can differ: NVML orders GPUs by PCI
  bus id, the driver numbers them as it probes them).
- `uuid`: "GPU-" and a UUID, drawn from `seed` (the same seed gives the same node).
- `mig`: None when MIG mode is off; else one dict per MIG device, with its `index` on the GPU,
  its `uuid` ("MIG-..."), its `profile` ("3g.40gb"), and `gi_cap_minor`, `ci_cap_minor`: the
  minors of the capability device nodes /dev/nvidia-caps/nvidia-cap<minor> that grant access to
  its GPU instance and to its compute instance. They are numbered like the driver's mig-minors
  table (procfs, driver/nvidia-caps): minors 1 and 2 are the config and monitor capabilities,
  then each GPU (by minor g) has 15 GPU instances of 9 minors each (the instance's own access,
  then compute instances 0 to 7), so GPU instance i of GPU g is 3 + 135 g + 9 i and its compute
  instance c is that + 1 + c. Here MIG device j is GPU instance j + 1 with one compute instance,
  0 (GPU instance ids depend on placement on a real GPU; only the minors matter to CDI).
- `libraries`: the driver's user-space libraries on the host, versioned with the driver.
"""

from __future__ import annotations

import random

DRIVER_VERSION = "550.90.07"
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
# The driver libraries a CUDA training container needs (the toolkit mounts more: graphics,
# video, the firmware); all carry the driver's version in their file names.
LIBRARIES = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libcudadebugger.so",
)
H100 = "NVIDIA-H100-80GB-HBM3"  # GPU Feature Discovery's nvidia.com/gpu.product of an H100 SXM
MIG_MINORS_PER_GI = 9  # the GPU instance's access and compute instances 0 .. 7
MIG_MINORS_PER_GPU = 15 * MIG_MINORS_PER_GI
FIRST_MIG_MINOR = 3  # after config (1) and monitor (2)


def uuid_from(rng: random.Random, prefix: str) -> str:
    """prefix-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in lowercase hex, as NVML prints UUIDs."""
    digits = f"{rng.getrandbits(128):032x}"
    return f"{prefix}-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def gi_cap_minor(gpu_minor: int, gpu_instance: int) -> int:
    return FIRST_MIG_MINOR + MIG_MINORS_PER_GPU * gpu_minor + MIG_MINORS_PER_GI * gpu_instance


def ci_cap_minor(gpu_minor: int, gpu_instance: int, compute_instance: int) -> int:
    return gi_cap_minor(gpu_minor, gpu_instance) + 1 + compute_instance


def gpu_node(
    gpus: int = 8,
    product: str = H100,
    mig: dict[int, list[str]] | None = None,
    seed: int = 0,
    driver_version: str = DRIVER_VERSION,
    minors: list[int] | None = None,
    mig_capable: bool = True,
) -> dict:
    """A node of `gpus` GPUs of `product` (see the module docstring). `mig` maps a GPU index to
    the profiles of its MIG devices (that GPU is in MIG mode; [] for MIG mode with no device);
    `minors[i]` is GPU i's device minor (default: i)."""
    rng = random.Random(seed)
    minors = list(range(gpus)) if minors is None else list(minors)
    assert len(minors) == gpus, f"{gpus} GPUs need {gpus} minors, got {minors}"
    node_gpus = []
    for index in range(gpus):
        minor = minors[index]
        gpu = {
            "index": index,
            "uuid": uuid_from(rng, "GPU"),
            "minor": minor,
            "product": product,
            "mig_capable": mig_capable,
            "mig": None,
        }
        if mig is not None and index in mig:
            gpu["mig"] = [
                {
                    "index": j,
                    "uuid": uuid_from(rng, "MIG"),
                    "profile": profile,
                    "gi_cap_minor": gi_cap_minor(minor, j + 1),
                    "ci_cap_minor": ci_cap_minor(minor, j + 1, 0),
                }
                for j, profile in enumerate(mig[index])
            ]
        node_gpus.append(gpu)
    return {
        "driver_version": driver_version,
        "libraries": [f"{LIBRARY_DIR}/{name}.{driver_version}" for name in LIBRARIES],
        "gpus": node_gpus,
    }
