"""Public tests for containers.py (a GPU in a container): run them while you work with

    pytest assignments/orchestration/test_orchestration_containers.py

Your functions run in a worker process, never inside pytest. The nodes come from
grader.models.gpu_node (read its docstring). The hidden suite also validates your CDI specs
against a JSON schema of the CDI specification, your pods against the official Kubernetes
client's V1Pod and Kubernetes' own OpenAPI schema (kubernetes_validate, strict), emulates the
scheduler on them (taints, node affinity, extended resources, /dev/shm), and checks every refusal.
"""

from __future__ import annotations

from grader.models.gpu_node import gpu_node


def test_a_node_of_two_gpus_gives_two_names_per_gpu_and_all(submission):
    node = gpu_node(2, seed=1, minors=[1, 0])
    spec = submission.function("cdi_spec")(node)
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "nvidia.com/gpu")
    uuids = [gpu["uuid"] for gpu in node["gpus"]]
    names = [device["name"] for device in spec["devices"]]
    assert names == ["0", uuids[0], "1", uuids[1], "all"], "devices: each GPU by index then UUID, then 'all'"
    nodes = {device["name"]: [n["path"] for n in device["containerEdits"]["deviceNodes"]] for device in spec["devices"]}
    # GPU 0's device node is /dev/nvidia<its minor>, here /dev/nvidia1.
    assert nodes["0"] == nodes[uuids[0]] == ["/dev/nvidia1"]
    assert nodes["all"] == ["/dev/nvidia1", "/dev/nvidia0"]
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]


def test_a_gpu_in_mig_mode_is_given_as_its_mig_devices(submission):
    node = gpu_node(2, mig={1: ["3g.40gb", "3g.40gb"]}, seed=2)
    spec = submission.function("cdi_spec")(node)
    gpu = node["gpus"][1]
    names = [device["name"] for device in spec["devices"]]
    migs = gpu["mig"]
    assert names == ["0", node["gpus"][0]["uuid"], "1:0", migs[0]["uuid"], "1:1", migs[1]["uuid"], "all"]
    first = spec["devices"][2]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in first] == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{migs[0]['gi_cap_minor']}",
        f"/dev/nvidia-caps/nvidia-cap{migs[0]['ci_cap_minor']}",
    ]


def test_a_training_pod_asks_for_its_gpus_in_limits_and_mounts_a_large_dev_shm(submission):
    pod = submission.function("training_pod")(
        "llama", 3, "nvcr.io/nvidia/pytorch:25.01-py3", 8, "NVIDIA-H100-80GB-HBM3"
    )
    assert (pod["kind"], pod["metadata"]["name"], pod["spec"]["runtimeClassName"]) == ("Pod", "llama-3", "nvidia")
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8", "a quantity is a string, in limits"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["spec"]["volumes"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert (env["NCCL_SOCKET_IFNAME"], env["NCCL_IB_HCA"]) == ("eth0", "mlx5")


def test_a_mig_pod_without_rdma_asks_for_mig_devices_and_uses_sockets(submission):
    pod = submission.function("training_pod")(
        "bert", 0, "img", 2, "NVIDIA-A100-SXM4-40GB", mig_profile="3g.20gb", rdma=False
    )
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/mig-3g.20gb": "2"}
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env
