"""What share of a link's nominal rate carries gradient bytes: headers and framing take the rest.

A NIC's nominal rate counts every bit on the wire. Over TCP/IPv4 on Ethernet each frame of an MTU of
M bytes carries M - 52 bytes of payload (IPv4 20, TCP 20, the timestamp option Linux sends by
default 12) in M + 38 bytes of wire time (Ethernet header 14, FCS 4, preamble 8, inter-frame gap 12):
at the usual 1500 bytes 1448 / 1538 = 94.1%, with 9000-byte jumbo frames 99.0%. A Linux traffic
shaper (`tc` tbf, as on sgdscale's emulated cluster) counts a frame from its Ethernet header without
FCS, preamble or gap: 1448 / 1514 = 95.6%. RDMA fabrics (InfiniBand, EFA) carry a few dozen bytes
of header per 4 KiB packet; `none` takes their rate as payload.

Only predictions from a nominal rate use this: a measured network file (`sgdscale netbench`)
already contains it. On the emulated cluster the point-to-point fits of the 57 network files the
held-out sets measured where the CPU did not bind moved payload at 95.5% of the shaped rate in the
median (quartiles 95.3-95.6%, range 85.3-99.0%; `benchmarks/link_payload.py`).
"""

from __future__ import annotations

from sgdscale.errors import UserError

TCP_IP_HEADER_BYTES = 20 + 20 + 12  # IPv4, TCP, TCP timestamps option
ETHERNET_HEADER_BYTES = 14
ETHERNET_WIRE_EXTRA_BYTES = 4 + 8 + 12  # FCS, preamble and start delimiter, inter-frame gap
DEFAULT_MTU_BYTES = 1500
MTU_BYTES_RANGE = (576, 65536)  # IPv4's least MTU, the largest a Linux interface takes
FRAMINGS = {
    "ethernet": "TCP over Ethernet; the rate is the NIC's line rate",
    "tc": "TCP over a link shaped by Linux tc (the rate counts frames from their Ethernet header)",
    "none": "the rate is already payload (RDMA fabrics such as InfiniBand or EFA)",
}


def payload_fraction(framing: str = "ethernet", mtu_bytes: int = DEFAULT_MTU_BYTES) -> float:
    """Payload bytes per byte of the nominal rate (module docstring)."""
    if framing not in FRAMINGS:
        raise UserError(f"unknown link framing '{framing}'; choose one of {', '.join(FRAMINGS)} "
                        "(e.g. --framing ethernet)")
    if framing == "none":
        return 1.0
    low, high = MTU_BYTES_RANGE
    if not isinstance(mtu_bytes, int) or not low <= mtu_bytes <= high:
        raise UserError(f"MTU must be a whole number of bytes from {low} to {high}, got {mtu_bytes} "
                        "(e.g. --mtu 1500, or --mtu 9000 for jumbo frames)")
    counted = mtu_bytes + ETHERNET_HEADER_BYTES + (ETHERNET_WIRE_EXTRA_BYTES if framing == "ethernet" else 0)
    return (mtu_bytes - TCP_IP_HEADER_BYTES) / counted
