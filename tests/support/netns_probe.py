"""Starts windows on cloud metadata addresses, in every form, from inside a private network
namespace: `unshare -n python -m tests.support.netns_probe DIR` (as root).

The namespace has a loopback interface only, so even a collector that failed to refuse could
reach no real metadata service. Two collectors run in it: one connecting directly, one through
an HTTP proxy (a test server that counts what reaches it). Prints a JSON object:
`{"direct": {target: [status, message]}, "proxy": {...}, "proxied_requests": [paths]}`.
"""

import fcntl
import json
import socket
import struct
import sys
from pathlib import Path

import httpx

from tests.support.collector import run_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload

# Every form a metadata address or name can be written in, as a user of the API could.
METADATA_TARGETS = [
    "169.254.169.254:80",
    "2852039166:80",
    "http://0xa9fea9fe/latest/meta-data/",
    "169.254.43518:80",
    "http://0251.0376.0251.0376/",
    "[::ffff:169.254.169.254]:80",
    "[::a9fe:a9fe]:80",
    "[::ffff:0:a9fe:a9fe]:80",
    "[64:ff9b::a9fe:a9fe]:80",
    "[2002:a9fe:a9fe::1]:80",
    "[fd00:ec2::254]:80",
    "100.100.100.200:80",
    "[64:ff9b::6464:64c8]:80",
    "[::]:80",
    "0.0.0.0:80",
    "metadata.google.internal:80",
    "http://instance-data/latest/meta-data/",
]


def loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, request)[:18])[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def starts(base_url: str, targets: list[str]) -> dict[str, list[object]]:
    answers: dict[str, list[object]] = {}
    with httpx.Client(base_url=base_url, timeout=30, trust_env=False) as api:
        for index, target in enumerate(targets):
            answer = api.post(f"/windows/w{index}/start", json={"targets": [target]})
            message = answer.json()["detail"][0]["msg"] if answer.status_code == 422 else ""
            answers[target] = [answer.status_code, message]
    return answers


def main(folder: Path) -> None:
    loopback_up()
    report: dict[str, object] = {}
    with serve_metrics(body=drafts_payload(10)) as proxy, serve_metrics(body=b"") as local:
        with run_collector(f"sqlite:///{folder}/direct.db", folder) as direct:
            report["direct"] = starts(direct.base_url, [*METADATA_TARGETS, local.target])
        proxied_env = {"HTTP_PROXY": f"http://{proxy.target}", "NO_PROXY": ""}
        with run_collector(f"sqlite:///{folder}/proxy.db", folder, **proxied_env) as through:
            report["proxy"] = starts(through.base_url, [*METADATA_TARGETS, "vllm.example:8000"])
        report["proxied_requests"] = [request["path"] for request in proxy.requests]
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
