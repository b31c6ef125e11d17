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


def _mixture_and_copy(tmp_path: Path, *, samples: int, seed: int) -> tuple[dict, Path, Path]:
    """Pools of real text, a mixture of them and its materialized copy."""
    pools = mix_fixtures.build_pools(tmp_path, seq_len=64)
    spec = MixtureSpec.from_dict(
        {
            "tokens": 64 * samples,
            "seed": seed,
            "components": [{"pool": str(p), "weight": 1.0} for p in pools.values()],
        }
    )
    mixture = tmp_path / "mixture"
    build_mixture(spec, mixture)
    copy = tmp_path / "copy"
    materialize(str(mixture), str(copy))
    return pools, mixture, copy


def test_it_verifies_a_mixture_and_its_materialized_copy(tmp_path, capsys):
    _, mixture, copy = _mixture_and_copy(tmp_path, samples=500, seed=2)

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


def test_every_kind_lists_its_files_and_a_mapping_written_before_still_reads(tmp_path):
    """Mixtures and materialized copies list their files like tokenized sources and pools
    (``[{"path", "size", "xxh3", ...}]``); one written with the earlier mapping
    ``{path: entry}`` still verifies, materializes and keeps its content digest."""
    import json

    from shardcore import manifest as mf
    from tests.unit.manifest_fixtures import format2_document

    pools, mixture, copy = _mixture_and_copy(tmp_path, samples=300, seed=3)
    for artifact in (*pools.values(), mixture, copy):
        files = mf.read_manifest(artifact)["files"]
        assert len(files), artifact
        assert all({"path", "size", "xxh3", "blocks"} <= set(e) | {"blocks"} for e in files)
        assert all(len(e["blocks"]) == 16 * -(-e["size"] // e["block_size"]) for e in files)

    for artifact in (mixture, copy):
        path = Path(artifact) / mf.MANIFEST_NAME
        listed = format2_document(mf.read_manifest(artifact))
        digest = mf.content_digest(listed)
        old = {**listed, "files": {e["path"]: e for e in listed["files"]}}
        path.write_text(json.dumps(old, indent=1, sort_keys=True))
        read = mf.read_manifest(artifact)
        assert isinstance(read["files"], dict)
        assert mf.file_entries(read) == sorted(listed["files"], key=lambda e: e["path"])
        assert mf.content_digest(read) == digest
        assert verify(artifact).problems == []
    again = tmp_path / "again"
    materialize(str(mixture), str(again))  # from the mixture with the mapping
    assert mf.read_manifest(again)["fingerprint"] == mf.read_manifest(copy)["fingerprint"]
    assert verify(again).problems == []
