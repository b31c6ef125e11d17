"""Which addresses a webhook may reach (webapp.ops.netguard, pure Python): every kind of
internal address, IPv4 and IPv6, also when IPv6 carries IPv4; the allow-list; the setting
that fills it stops the process naming a bad item."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webapp.ops.netguard import (
    TargetRefused,
    TargetUnresolved,
    address_refusal,
    parse_networks,
    target_check,
)

ROOT = Path(__file__).resolve().parents[2]

INTERNAL = {
    "127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback",
    "0.0.0.0": "unspecified", "::": "unspecified",
    "10.0.0.1": "private", "172.16.5.4": "private", "192.168.1.1": "private",
    "fd12::1": "private", "169.254.169.254": "link-local", "fe80::1": "link-local",
    "100.64.0.1": "not globally routable", "224.0.0.251": "multicast", "ff02::1": "multicast",
    "240.0.0.1": "reserved", "255.255.255.255": "reserved",
    "::ffff:127.0.0.1": "loopback (it carries 127.0.0.1)",
    "::ffff:169.254.169.254": "link-local (it carries 169.254.169.254)",
    "64:ff9b::a9fe:a9fe": "link-local (it carries 169.254.169.254)",
    "2002:7f00:1::1": "loopback (it carries 127.0.0.1)",
}  # fmt: skip


def test_internal_addresses_are_refused_and_public_ones_pass():
    for text, kind in INTERNAL.items():
        why = address_refusal(ipaddress.ip_address(text))
        assert why == f"{ipaddress.ip_address(text)} is {kind}, not a public address", text
    for text in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e"):
        assert address_refusal(ipaddress.ip_address(text)) is None, text


def test_the_allow_list_lets_its_networks_through_also_inside_ipv6():
    allow = parse_networks("127.0.0.0/8, 10.20.0.0/16,fd00::/8")
    for text in ("127.0.0.1", "::ffff:127.0.0.1", "10.20.3.4", "fd00::7"):
        assert address_refusal(ipaddress.ip_address(text), allow) is None, text
    for text in ("10.21.0.1", "169.254.169.254", "::1", "192.168.0.1"):
        assert address_refusal(ipaddress.ip_address(text), allow), text
    assert parse_networks("") == () and parse_networks(" , ") == ()
    with pytest.raises(ValueError, match=r"ALLOW_NETWORKS: '10.0.0.1/8' is not a CIDR network"):
        parse_networks("127.0.0.0/8,10.0.0.1/8")
    with pytest.raises(ValueError, match=r"'intranet' is not a CIDR network"):
        parse_networks("intranet")


def test_target_check_names_the_scheme_the_host_and_where_to_connect():
    for url, why in {
        "ftp://8.8.8.8/": "scheme 'ftp': only http and https",
        "file:///etc/passwd": "scheme 'file': only http and https",
        "http:///x": "names no host",
        "http://8.8.8.8:99999/": "is not a URL",
        "http://[::1]:8080/": "::1 is loopback",
        "http://localhost:6379/": "host 'localhost' resolves to 127.0.0.1: 127.0.0.1 is loopback",
    }.items():
        with pytest.raises(TargetRefused, match=why.replace("(", r"\(").replace("[", r"\[")):
            target_check(url)
    with pytest.raises(TargetUnresolved, match="host 'hooks.invalid' does not resolve"):
        target_check("https://hooks.invalid/x")
    t = target_check("https://user:p%40ss@8.8.8.8/a/b?c=1")
    assert (t.scheme, t.host, t.port, t.path, t.host_header) == (
        "https",
        "8.8.8.8",
        443,
        "/a/b?c=1",
        "8.8.8.8",
    )
    assert t.userinfo == ("user", "p@ss")
    t = target_check("http://localhost:8080", parse_networks("127.0.0.0/8"))
    assert (t.path, t.host_header, t.addresses) == (
        "/",
        "localhost:8080",
        (ipaddress.ip_address("127.0.0.1"),),
    )
    t = target_check("http://[2606:4700::1111]:81/")
    assert t.host_header == "[2606:4700::1111]:81"


def test_a_bad_allow_list_stops_the_settings_naming_it(tmp_path):
    env = {**os.environ, "SHARDYARD_DATA": str(tmp_path), "SECRET_KEY": "k" * 40,
           "SHARDYARD_WEBHOOK_ALLOW_NETWORKS": "10.0.0.0/8,10.0.0.1/8"}  # fmt: skip
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; django.setup()"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert "SHARDYARD_WEBHOOK_ALLOW_NETWORKS: '10.0.0.1/8' is not a CIDR network" in done.stderr, (
        done.stderr
    )
