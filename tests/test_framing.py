"""Framing: a nominal rate counts headers and framing, so predictions from it move payload slower."""

from __future__ import annotations

import json

import pytest

from sgdscale.cli import main
from sgdscale.cluster import Cluster
from sgdscale.comm.framing import payload_fraction
from sgdscale.errors import UserError


def test_payload_fractions_from_header_sizes():
    assert payload_fraction("ethernet") == pytest.approx(1448 / 1538)
    assert payload_fraction("tc") == pytest.approx(1448 / 1514)
    assert payload_fraction("ethernet", 9000) == pytest.approx(8948 / 9038)
    assert payload_fraction("none") == 1.0


@pytest.mark.parametrize("framing, mtu, words", [("carrier-pigeon", 1500, "unknown link framing"),
                                                  ("ethernet", 100, "MTU must be"),
                                                  ("tc", 1500.5, "MTU must be")])
def test_bad_framing_or_mtu_is_one_clear_error(framing, mtu, words):
    with pytest.raises(UserError, match=words):
        Cluster(2, framing=framing, mtu_bytes=mtu)


def predict_json(tmp_path, capsys, name: str, *args: str) -> dict:
    path = tmp_path / f"{name}.json"
    code = main(["predict", "gpt2", "--workers", "4", "--bandwidth", "1Gbit", "--method", "coarse",
                 "--json", str(path), *args])
    assert code == 0, capsys.readouterr().err
    return json.loads(path.read_text())


def test_a_link_bound_prediction_scales_with_the_payload_rate(tmp_path, capsys):
    """gpt2 on 4 workers at 1 Gbit/s is bound by the link: its communication time scales with
    1 / payload fraction, so the step time grows by the framing's share of it."""
    results = {f: predict_json(tmp_path, capsys, f, "--framing", f) for f in ("none", "tc", "ethernet")}
    results["jumbo"] = predict_json(tmp_path, capsys, "jumbo", "--mtu", "9000")
    step = {k: v["results"][0]["iteration_s"]["mean"] for k, v in results.items()}
    comm = {k: v["results"][0]["breakdown"]["exposed_comm_s"] for k, v in results.items()}
    assert comm["none"] > 0.5 * step["none"]  # link-bound, so framing shows
    for name, fraction in (("tc", 1448 / 1514), ("ethernet", 1448 / 1538), ("jumbo", 8948 / 9038)):
        assert step[name] > step["none"]
        assert comm[name] == pytest.approx(comm["none"] / fraction, rel=0.02)
    assert step["ethernet"] > step["tc"] > step["jumbo"]
    cluster = results["ethernet"]["inputs"]["cluster"]
    assert (cluster["framing"], cluster["mtu_bytes"]) == ("ethernet", 1500)
    assert results["ethernet"]["inputs"]["topology"]["nic"]["payload_scale"] == pytest.approx(1448 / 1538)


def test_the_default_is_ethernet(tmp_path, capsys):
    default = predict_json(tmp_path, capsys, "default")
    ethernet = predict_json(tmp_path, capsys, "ethernet", "--framing", "ethernet")
    assert [r["throughput"] for r in default["results"]] == [r["throughput"] for r in ethernet["results"]]


def test_presets_say_their_framing(tmp_path, capsys):
    from sgdscale.clusters import load_cluster

    assert load_cluster("dgx-a100").nic.framing == "none"
    assert load_cluster("8xV100-pcie").nic.framing == "ethernet"
    spec = tmp_path / "c.json"
    spec.write_text(json.dumps({"schema": "sgdscale.cluster/1", "nic": {"bandwidth": "1Gbit", "mtu": 9000}}))
    jumbo = predict_json(tmp_path, capsys, "file", "--cluster", str(spec))
    assert jumbo["inputs"]["cluster"]["mtu_bytes"] == 9000


def test_bad_mtu_on_the_command_line(capsys):
    code = main(["predict", "gpt2", "--workers", "2", "--mtu", "12"])
    err = capsys.readouterr().err
    assert code == 2 and "MTU must be" in err and "Traceback" not in err
