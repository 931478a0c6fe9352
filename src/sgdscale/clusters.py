"""Cluster files (`sgdscale.cluster/1`) and named presets: nodes, devices per node, their links.

A cluster file describes the hardware once so that `sgdscale predict --cluster FILE` does not need
a line of flags; a preset is the same description built in (`--cluster dgx-a100`). Rates and times
are numbers in base units (`_bps`, `_s`) or strings with units ("300GB/s", "25Gbit", "5us").
The sources of every preset number are in docs/clusters.md. A NIC's `framing` (ethernet, tc or
none) and `mtu` say what its rate counts besides payload (`sgdscale.comm.framing`; default: TCP over
Ethernet at MTU 1500).

    {"schema": "sgdscale.cluster/1", "name": "my-cluster", "device": "A100",
     "nodes": 4, "gpus_per_node": 8,
     "intra": {"bandwidth": "300GB/s", "latency": "2us"},
     "nic": {"bandwidth": "200Gbit", "latency": "5us", "framing": "none"},
     "servers": {"count": 1, "bandwidth": "100Gbit"},
     "slow_nodes": [{"node": 2, "compute_scale": 1.5}],
     "slow_nics": [{"node": 1, "bandwidth": "10Gbit"}]}
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sgdscale.comm.framing import DEFAULT_MTU_BYTES, MTU_BYTES_RANGE
from sgdscale.errors import UserError
from sgdscale.inputs import LATENCY_S, ComputeScale, GpusPerNode, NodeIndex, ServerCount, WorkerCount
from sgdscale.jsonio import read_document
from sgdscale.units import parse_bandwidth_bps, parse_time_s

if TYPE_CHECKING:
    from sgdscale.profile import Profile

CLUSTER_SCHEMA = "sgdscale.cluster/1"


class LinkSpec(BaseModel):
    """One link: bandwidth (bit/s or a string with units) and one-way latency (s or a string)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    bandwidth: float | str
    latency: float | str = 0.0

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth(cls, value: float | str) -> float:
        try:
            return parse_bandwidth_bps(value)
        except UserError as error:
            raise ValueError(str(error)) from None

    @field_validator("latency")
    @classmethod
    def _latency(cls, value: float | str) -> float:
        try:
            return parse_time_s(value, "latency", LATENCY_S)
        except UserError as error:
            raise ValueError(str(error)) from None

    @property
    def bandwidth_bps(self) -> float:
        return float(self.bandwidth)

    @property
    def latency_s(self) -> float:
        return float(self.latency)


class NicSpec(LinkSpec):
    """A node's NIC: a link, and what its rate counts besides payload (`sgdscale.comm.framing`)."""

    framing: Literal["ethernet", "tc", "none"] = "ethernet"
    mtu: int = Field(default=DEFAULT_MTU_BYTES, ge=MTU_BYTES_RANGE[0], le=MTU_BYTES_RANGE[1])


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    count: ServerCount = 1
    bandwidth: float | str | None = None

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth(cls, value: float | str | None) -> float | None:
        if value is None:
            return None
        try:
            return parse_bandwidth_bps(value)
        except UserError as error:
            raise ValueError(str(error)) from None


class SlowNode(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    node: NodeIndex
    compute_scale: ComputeScale


class SlowNic(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    node: NodeIndex
    bandwidth: float | str

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth(cls, value: float | str) -> float:
        try:
            return parse_bandwidth_bps(value)
        except UserError as error:
            raise ValueError(str(error)) from None


class ClusterSpec(BaseModel):
    """The hardware of a cluster (module docstring). `nodes` may be left out and given on the
    command line (`--nodes`, or `--workers` as total devices)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    schema_: Literal["sgdscale.cluster/1"] = Field(default=CLUSTER_SCHEMA, alias="schema")
    name: str = ""
    source: str = ""
    device: str = ""  # the devices' key in the catalog (`sgdscale.device`, e.g. A100); "" when unsaid
    nodes: WorkerCount | None = None
    gpus_per_node: GpusPerNode = 1
    intra: LinkSpec = LinkSpec(bandwidth=128e9, latency=5e-6)
    nic: NicSpec = NicSpec(bandwidth=10e9, latency=20e-6)
    servers: ServerSpec = ServerSpec()
    slow_nodes: list[SlowNode] = Field(default_factory=list)
    slow_nics: list[SlowNic] = Field(default_factory=list)

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not value:
            return value
        from sgdscale.device import get_device

        try:
            return get_device(value).key
        except UserError as error:
            raise ValueError(str(error)) from None

    def check_nodes(self, nodes: int) -> None:
        """Slow nodes and NICs must name nodes that exist."""
        for entry in [*self.slow_nodes, *self.slow_nics]:
            if entry.node >= nodes:
                raise UserError(f"cluster {self.name or 'file'}: a slow node/NIC names node {entry.node}, but nodes "
                                f"are numbered 0..{nodes - 1}; fix the entry or give more --nodes")


PRESETS: dict[str, ClusterSpec] = {
    "dgx-a100": ClusterSpec(
        name="dgx-a100", gpus_per_node=8, device="A100",
        source="NVIDIA DGX A100 datasheet: 8x A100 SXM4, NVLink 3 via NVSwitch (600 GB/s per GPU, both "
               "directions together), 8x ConnectX-6 200 Gb/s HDR InfiniBand for compute",
        intra=LinkSpec(bandwidth="300GB/s", latency="2us"),
        nic=NicSpec(bandwidth="1600Gbit", latency="5us", framing="none")),
    "p4d.24xlarge": ClusterSpec(
        name="p4d.24xlarge", gpus_per_node=8, device="A100",
        source="AWS EC2 P4d instances page: 8x A100, NVSwitch 600 GB/s, 400 Gbps EFA networking",
        intra=LinkSpec(bandwidth="300GB/s", latency="2us"),
        nic=NicSpec(bandwidth="400Gbit", latency="15us", framing="none")),
    "8xV100-pcie": ClusterSpec(
        name="8xV100-pcie", gpus_per_node=8, device="V100",
        source="NVIDIA V100 datasheet (PCIe card: PCIe 3.0 x16, 32 GB/s both directions together); "
               "a 25 Gbit/s Ethernet NIC per node",
        intra=LinkSpec(bandwidth="16GB/s", latency="5us"),
        nic=NicSpec(bandwidth="25Gbit", latency="25us")),
    "cpu-ethernet": ClusterSpec(
        name="cpu-ethernet", gpus_per_node=1,
        source="one CPU worker per server on 10 Gbit/s Ethernet (sgdscale's defaults)",
        intra=LinkSpec(bandwidth="128Gbit", latency="5us"),
        nic=NicSpec(bandwidth="10Gbit", latency="20us")),
}


def device_note(cluster: str | None, profile: Profile, can_calibrate: bool = True) -> str | None:
    """What to say when the cluster (`--cluster`: a preset or file, or None) names its devices and the
    profile was measured on something else: its compute times then stand for another device's (a CPU
    profile on a DGX is a CPU cluster with NVLink), which is rarely what a user means. None when the
    cluster names no device, the profile names that device, or a calibration already said what speed
    to assume."""
    spec = load_cluster(cluster) if cluster else None
    if spec is None or not spec.device or profile.provenance.get("calibration"):
        return None
    if profile.device_key is not None:
        if profile.device_key == spec.device:
            return None
    elif re.search(rf"\b{re.escape(spec.device)}\b", str(profile.device), re.IGNORECASE):  # "cuda: NVIDIA A100-SXM4-80GB"
        return None
    fix = (f"to predict {spec.device} speed, give --target-device {spec.device} (a roofline from the profile's "
           "FLOPs and bytes) or --device-throughput SAMPLES/s --batch-size N (a rate you measured)") if can_calibrate \
        else (f"to search at {spec.device} speed, profile the model on one of those devices (or see what "
              f"`sgdscale predict --target-device {spec.device}` gives)")
    return (f"the cluster {spec.name or 'file'} has {spec.device} devices, but the profile was measured on "
            f"{profile.device}: its compute times are used as measured; {fix}")


def load_cluster(name_or_path: str) -> ClusterSpec:
    """A preset by name, or a `sgdscale.cluster/1` file; one-line errors naming the field."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    return read_document(name_or_path, CLUSTER_SCHEMA, ClusterSpec, what="cluster file",
                         missing=f"--cluster {name_or_path}: no such file or preset; presets: "
                                 f"{', '.join(PRESETS)} (docs/clusters.md)",
                       fix="fix that value (the format: docs/clusters.md)")
