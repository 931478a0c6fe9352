"""`sgdscale predict` on multi-device nodes: flags, presets, cluster files, the JSON it writes."""

from __future__ import annotations

import json

import pytest

from sgdscale.cli import main
from sgdscale.clusters import PRESETS, load_cluster
from sgdscale.errors import UserError


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["predict", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_nodes_and_gpus_per_node_answer_per_level(tmp_path, capsys):
    path = tmp_path / "p.json"
    code, out, err = run(capsys, "resnet50", "--nodes", "4", "--gpus-per-node", "8", "--bandwidth", "25Gbit",
                         "--iterations", "10", "--json", str(path))
    assert code == 0, err
    assert "limited by" in out and "4 nodes; busy per step" in out and "intra-node link" in out
    data = json.loads(path.read_text())
    topo = data["inputs"]["topology"]
    assert topo["gpus_per_node"] == 8 and topo["nodes"] == {"32": 4} and topo["allreduce"] == "flat"
    assert data["inputs"]["cluster"]["bandwidth_bps"] == 25e9
    for result in data["results"]:
        assert result["workers"] == 32
        assert set(result["levels"]) >= {"compute", "NIC", "intra-node link"}
        assert result["limited_by"] in ("compute", "NIC", "intra-node link", "stragglers")
        assert 0 < result["efficiency"] <= 1 + 1e-9


def test_workers_fill_nodes_and_one_node_never_uses_the_nic(tmp_path, capsys):
    path = tmp_path / "p.json"
    code, _, err = run(capsys, "mlp", "--workers", "4,16", "--gpus-per-node", "8", "--bandwidth", "1Gbit",
                       "--intra-bandwidth", "300GB/s", "--allreduce", "hierarchical", "--iterations", "5",
                       "--json", str(path))
    assert code == 0, err
    results = json.loads(path.read_text())["results"]
    four = [r for r in results if r["workers"] == 4]
    sixteen = [r for r in results if r["workers"] == 16]
    assert all(r["levels"]["NIC"] == 0 for r in four)  # 4 devices fit one node
    assert all(r["levels"]["NIC"] > 0 and r["limited_by"] == "NIC" for r in sixteen)


def test_preset_and_cluster_file(tmp_path, capsys):
    code, out, err = run(capsys, "resnet50", "--cluster", "dgx-a100", "--nodes", "2", "--allreduce", "auto",
                         "--iterations", "5", "--method", "coarse")
    assert code == 0, err
    assert "nodes of 8 devices, 2.4 Tbit/s inside a node" in out and "NIC per node 1.6 Tbit/s" in out
    assert "auto scheme" in out and "2 nodes" in out
    spec = tmp_path / "c.json"
    spec.write_text(json.dumps({"schema": "sgdscale.cluster/1", "name": "two", "nodes": 2, "gpus_per_node": 2,
                                "intra": {"bandwidth": "80Gbit", "latency": "5us"},
                                "nic": {"bandwidth": "10Gbit", "latency": "20us"},
                                "slow_nics": [{"node": 1, "bandwidth": "1Gbit"}]}))
    path = tmp_path / "p.json"
    code, out, err = run(capsys, "cnn", "--cluster", str(spec), "--iterations", "5", "--json", str(path))
    assert code == 0, err
    data = json.loads(path.read_text())
    assert data["inputs"]["cluster"]["slow_links"] == [[2, 1e9]]
    assert [r["workers"] for r in data["results"]] == [4, 4]


@pytest.mark.parametrize("content, message", [
    ({"schema": "sgdscale.cluster/1", "nic": {"bandwidth": "fast"}}, "nic.bandwidth = fast: cannot read bandwidth 'fast'"),
    ({"schema": "sgdscale.cluster/1", "gpus_per_node": 0}, "gpus_per_node = 0: too small"),
    ({"schema": "sgdscale.cluster/1", "nodes": 2, "slow_nics": [{"node": 5, "bandwidth": "1Gbit"}]}, "names node 5"),
    ({"schema": "sgdscale.cluster/2"}, "unsupported schema"),
    ({"schema": "sgdscale.cluster/1", "nic": {"bandwidth": "1Gbit", "speed": 3}}, "nic.speed = 3: Extra inputs"),
    ({"schema": "sgdscale.cluster/1", "device": "A100-80GB"}, "device = A100-80GB: unknown device 'A100-80GB'; known"),
])
def test_bad_cluster_files_are_one_line(tmp_path, capsys, content, message):
    spec = tmp_path / "c.json"
    spec.write_text(json.dumps(content))
    code, out, err = run(capsys, "cnn", "--cluster", str(spec), "--iterations", "5")
    assert code == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--nodes", "2", "--workers", "4"], "not both"),
    (["--gpus-per-node", "0"], "--gpus-per-node 0: too small"),
    (["--allreduce", "ring2"], "unknown all-reduce scheme"),
    (["--ps-placement", "shared"], "unknown server placement"),
    (["--strategy", "ps-sync", "--ps-placement", "colocated", "--ps", "2", "--workers", "4"], "one per node"),
    (["--intra-bandwidth", "-3GB/s"], "bandwidth must be positive"),
    (["--cluster", "nope-cluster"], "no such file or preset"),
])
def test_bad_topology_flags(capsys, args, message):
    code, out, err = run(capsys, "cnn", "--iterations", "5", *args)
    assert code == 2
    assert message in err


def test_presets_load_and_cite_a_source():
    for name, spec in PRESETS.items():
        assert load_cluster(name) is spec and spec.source
    with pytest.raises(UserError):
        load_cluster("/nonexistent/cluster.json")


def test_a_cpu_profile_on_a_gpu_preset_says_so_and_how_to_retarget(tmp_path, capsys):
    """The built-in profiles were measured on a CPU: on a DGX their compute times would stand for an
    A100's without a word. The note names both devices and the options that retarget."""
    code, out, err = run(capsys, "resnet50", "--cluster", "dgx-a100", "--nodes", "2", "--iterations", "5",
                         "--method", "coarse")
    assert code == 0, err
    assert ("note: the cluster dgx-a100 has A100 devices, but the profile was measured on cpu: Intel(R) Xeon(R) "
            "Processor, 1 thread: its compute times are used as measured; to predict A100 speed, give "
            "--target-device A100") in out
    code, out, err = run(capsys, "resnet50", "--cluster", "dgx-a100", "--nodes", "2", "--iterations", "5",
                         "--method", "coarse", "--target-device", "A100")
    assert code == 0, err
    assert "has A100 devices" not in out and "calibrated profile: roofline vm-cpu-1t" in out
    spec = tmp_path / "c.json"  # a cluster file that names no device says nothing
    spec.write_text(json.dumps({"schema": "sgdscale.cluster/1", "gpus_per_node": 2}))
    code, out, err = run(capsys, "resnet50", "--cluster", str(spec), "--nodes", "2", "--iterations", "5",
                         "--method", "coarse")
    assert code == 0, err
    assert "devices, but the profile was measured on" not in out


def test_a_profile_of_the_clusters_device_needs_no_note():
    from sgdscale.clusters import device_note
    from sgdscale.profile import load_profile

    cpu = load_profile("resnet50")
    assert device_note("cpu-ethernet", cpu) is None  # names no device
    assert device_note(None, cpu) is None
    on_a100 = cpu.model_copy(update={"device": "cuda: NVIDIA A100-SXM4-80GB", "device_key": None})
    assert device_note("dgx-a100", on_a100) is None
    on_a10 = cpu.model_copy(update={"device": "cuda: NVIDIA A10", "device_key": None})  # A10 is not A100
    assert "has A100 devices, but the profile was measured on cuda: NVIDIA A10:" in device_note("dgx-a100", on_a10)
    assert "has V100 devices" in device_note("8xV100-pcie", cpu)
