"""cdi_spec opens /dev/nvidia<index> for GPU <index>: right only where the driver's minors equal
NVML's indices. On a node whose minors are permuted (or start at 4), a container asking for GPU 0
gets another GPU's device node, and MIG devices open the wrong parent."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: containers.py
# select: containers and (cdi or minor or capability or all_device)
# fails: device_node_of_its_minor|test_mig_devices_open_their_gpu|test_the_all_device_opens
# kind:
# message: expected \[/dev/nvidia

_cdi_spec_by_minor = cdi_spec


def cdi_spec(node):
    spec = _cdi_spec_by_minor(node)
    of_the_index = {gpu_device_node(gpu["minor"]): gpu_device_node(gpu["index"]) for gpu in node["gpus"]}
    for device in spec["devices"]:
        for device_node in device["containerEdits"]["deviceNodes"]:
            device_node["path"] = of_the_index.get(device_node["path"], device_node["path"])
    return spec
