"""Cloud metadata services: the addresses and names a scrape must never reach, with a source
for each entry. A target policy (`core.targets.TargetPolicy`) refuses them unless a listed
network or name allows one; through an HTTP proxy the names are refused, and the addresses
the name resolves to here (`sources.scrape.pinning`).
"""

import ipaddress

METADATA = "cloud metadata"

#: (network, what it is, where it is documented).
METADATA_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str, str], ...] = (
    # 169.254.169.254: AWS, GCP, Azure, Oracle, DigitalOcean, OpenStack instance metadata;
    # 169.254.170.2: AWS ECS task credentials; 169.254.170.23: EKS Pod Identity.
    (ipaddress.ip_network("169.254.0.0/16"), f"link-local ({METADATA})",
     "RFC 3927; AWS IMDS, ECS task metadata and EKS Pod Identity user guides; GCP and Azure "
     "instance metadata docs"),
    (ipaddress.ip_network("fe80::/10"), f"link-local ({METADATA})", "RFC 4291 section 2.5.6"),
    # AWS's IPv6 link-local services: IMDS fd00:ec2::254, Route 53 Resolver fd00:ec2::253,
    # Time Sync fd00:ec2::123, EKS Pod Identity Agent fd00:ec2::23 (a credentials endpoint).
    (ipaddress.ip_network("fd00:ec2::/64"), f"AWS instance services ({METADATA})",
     "AWS EC2 user guide, 'Instance metadata service IPv6 endpoint'; EKS user guide, "
     "'EKS Pod Identity Agent'"),
    (ipaddress.ip_network("fd20:ce::254/128"), f"GCP metadata server over IPv6 ({METADATA})",
     "Google Compute Engine docs, 'About VM metadata': the metadata server's IPv6 address"),
    (ipaddress.ip_network("100.100.100.200/32"), f"Alibaba Cloud metadata ({METADATA})",
     "Alibaba Cloud ECS docs, 'Instance metadata'"),
    (ipaddress.ip_network("168.63.129.16/32"), f"Azure wire server ({METADATA})",
     "Azure docs, 'What is IP address 168.63.129.16?'"),
)  # fmt: skip

#: Host names of cloud metadata services, refused by name (through a proxy too) unless listed:
#: GCP (metadata, metadata.google.internal, metadata.goog), AWS (instance-data,
#: instance-data.ec2.internal), Azure, Tencent Cloud, Equinix Metal and Oracle Cloud, each in
#: its provider's metadata docs.
METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
     "instance-data.ec2.internal", "metadata.azure.internal", "metadata.tencentyun.com",
     "metadata.platformequinix.com", "metadata.oraclecloud.com"}
)  # fmt: skip
