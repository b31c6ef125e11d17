"""``shardyard verify`` checks mixtures and materialized mixtures too, and names the file
and block of a flipped byte."""

from __future__ import annotations

from pathlib import Path

from shardcore.cli import main
from shardcore.materialize import materialize
from shardcore.mixture import MixtureSpec, build_mixture
from shardcore.verify import verify
from tests.unit import mix_fixtures


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_it_verifies_a_mixture_and_its_materialized_copy(tmp_path, capsys):
    pools = mix_fixtures.build_pools(tmp_path, seq_len=64)
    spec = MixtureSpec.from_dict(
        {
            "tokens": 64 * 500,
            "seed": 2,
            "components": [{"pool": str(p), "weight": 1.0} for p in pools.values()],
        }
    )
    mixture = tmp_path / "mixture"
    build_mixture(spec, mixture)
    copy = tmp_path / "copy"
    materialize(str(mixture), str(copy))

    for artifact in (mixture, copy):
        report = verify(artifact)
        assert report.files_checked > 0 and report.problems == [], report.problems
        assert main(["verify", str(artifact)]) == 0

    victim = sorted((copy / "shards").glob("*.bin"))[0]
    _flip(victim, 10)
    report = verify(copy)
    assert [(p.path, p.offset) for p in report.problems] == [(str(victim.relative_to(copy)), 0)]
    capsys.readouterr()
    assert main(["verify", str(copy)]) != 0
    printed = capsys.readouterr()
    assert f"{victim.name} at byte 0: checksum mismatch" in printed.out + printed.err
