"""The command-line walk-through of docs/command-line.md builds the same bytes as the code it was pinned
on: tokenize -> verify -> pool (filter, validation slice, two workers) -> mix -> locate ->
export (Megatron-LM with its index cache, OLMo-core, nanotron) -> materialize -> verify.

For every artifact the test pins its fingerprint, a digest of what its manifest says
without the file list (format 3: the header without its layout, plus the shard table's
shards and cumulative records), and the digest of its files (path, size, xxh3: what
``verify`` checks); every other file the walk-through writes (exports, index caches,
plans, locate and quality output, the manifests' shard tables and block checksums) is
pinned by its SHA-256. A refactor that changes one byte of output, a
fingerprint, or what a manifest says fails here, naming the file.

Fingerprints hash the inputs' absolute paths and modification times, so the walk-through
runs in one fixed directory (``WORK``, under a lock) on a corpus with fixed modification
times. The corpus is the demo corpus (``shardcore.demo``) of the running interpreter's
standard library: the pins hold for the Python version they were made with
(``PINNED_PYTHON``); another version skips. On that version a different corpus fails.

To pin again (only when an output is meant to change), run this file with the code to pin
on: ``PYTHONPATH=<checkout> python tests/integration/test_walkthrough_pins.py <checkout>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

ROOT = Path(__file__).resolve().parents[2]
WORK = Path("/tmp/shardyard-walkthrough-pins")
MTIME = 1_700_000_000
CORPUS_BYTES = 300_000

# The walk-through of docs/command-line.md, on a smaller corpus and budget.
COMMANDS = [
    "tokenize corpus/docstrings --out tok/docstrings --quiet",
    "tokenize corpus/reference --out tok/reference --quiet",
    "tokenize corpus/stdlib-code --out tok/code --workers 2 --quiet",
    "verify tok/code",
    "pool tok/docstrings tok/reference --out pools/prose --seq-len 512 "
    "--filter \"lang = 'en'\" --val-fraction 0.01 --quiet",
    "pool tok/code --out pools/code --seq-len 512 "
    "--filter \"package NOT IN ('idlelib', 'turtledemo')\" --workers 2 --quiet",
    "verify pools/prose",
    "quality pools/prose --by kind > quality-prose.txt",
    "locate pools/prose --sample 100 > locate-prose.txt",
    "mix --component pools/prose:0.7 --component pools/code:0.3 --tokens 100000 "
    "--out mixes/prose-code",
    "locate mixes/prose-code --tokens 51200 > locate-mix.txt",
    "quality mixes/prose-code --by pool > quality-mix.txt",
    "export mixes/prose-code --format megatron --out megatron",
    "export mixes/prose-code --format megatron --stage main --out data-args.txt",
    "export mixes/prose-code --format olmo --out olmo.yaml",
    "export mixes/prose-code --format nanotron --global-batch-size 2 --out nanotron.yaml",
    "materialize mixes/prose-code --out mixes/prose-code-flat --workers 2",
    "export mixes/prose-code --format olmo --materialized mixes/prose-code-flat "
    "--global-batch-size 2 --out olmo-exact.yaml",
    "verify mixes/prose-code",
    "verify mixes/prose-code-flat",
]

PINNED_PYTHON = "3.11.7"
# Made with the code before the library's files, sizes, formats and locate modules were
# reorganized (behaviour unchanged): the same fingerprints and bytes after it. Manifest
# format 3 changed only the manifest digests (format_version 3; with 2 they are the
# digests pinned before) and added each artifact's manifest.shards and manifest.blocks.
# Schedule format 2 (the mixture's per-chunk counts file, keyed epoch permutations in its
# fingerprint) changed the mixture's fingerprint, manifest and file list, and with them
# what names the fingerprint (exports, the materialized copy's manifest); the schedule's
# arrays and every data byte are unchanged.
PINNED = {
    "artifacts": {
        "mixes/prose-code": {
            "files": "c2b1c1c7b76b411f493f0dd2f0e2d31b",
            "fingerprint": "d101684385524cef60174c0cfe7f35f5",
            "manifest": "965de3bb6e8156d37d5b0e31374d518e",
        },
        # A materialized copy's fingerprint names its mixture by fingerprint, not by path
        # (the same copy on disk and on object storage has one): pinned since that change.
        "mixes/prose-code-flat": {
            "files": "aadafa7f562ce4f97162e542e59e0d4d",
            "fingerprint": "ad4952155874786b671b43b313bf173b",
            "manifest": "f9095b6f60bc48dd6194bcd57597ae7d",
        },
        "pools/code": {
            "files": "d74d740396aaa180c03e9d9191abdccb",
            "fingerprint": "d4b5d93eb2ec5528252c09800f5d6e13",
            "manifest": "35289a80e65ee64e16ed4413857a351f",
        },
        "pools/prose": {
            "files": "409d05735183fcfe569ad1aa98495926",
            "fingerprint": "4db65dcf5556ef057924bfcb81c447d0",
            "manifest": "b5d252969409c2cf8d6c2d4bd8da4c4e",
        },
        "pools/prose/val": {
            "files": "7a7c49d4632a759e78db86f1f5029121",
            "fingerprint": "a05476b15d5a9d32bb7b7e3e92ae42ea",
            "manifest": "c463be6bd6f521e146abaf537c9c6680",
        },
        "tok/code": {
            "files": "b6b007e60b774837f5417af3015a8a77",
            "fingerprint": "dd4a7f6c7e812092dc74e2dc6dce9fb4",
            "manifest": "73a1e7dd655bd5de296e8fcb2a79a236",
        },
        "tok/docstrings": {
            "files": "7aac0118312723e234916eb640d4babc",
            "fingerprint": "641ffbe79f33737752fa200a4c38575e",
            "manifest": "696ca0c6286c79c5b0c2da260995bc20",
        },
        "tok/reference": {
            "files": "31b44c6ac4785b69e3e6029a1dcc7cae",
            "fingerprint": "691da99d96ed068a04ee996170c452c7",
            "manifest": "46f3b68eaa301733c1e15372f61feb19",
        },
    },
    "corpus": "7415786818f8c95741a3d4bdcfb928d4",
    "files": {
        "data-args.txt": "7031fd046cca3633205d4112a1b911fb24ec242c4964890d0fd972d61da7dac1",
        "locate-mix.txt": "e32e256418c935f2260409f0ecd9046da2dcf089cd46ad932b77e48087dabb02",
        "locate-prose.txt": "f1ebf38f5e9a45069dee0cf9f05e0c9ee67de3eb339f7c1033f276949a84e572",
        "megatron/cache/025a4414d3ffe5dfa05bc70013384566-GPTDataset-train-description.txt": "1d32b32a6d96742d93c2d957dce281081ccd4464a9b0bba29dfcc19cecc54208",
        "megatron/cache/025a4414d3ffe5dfa05bc70013384566-GPTDataset-train-document_index.npy": "ede0e448e552868cf237d0e8c2ef6c16dc8ab530764eb123695c6ce9cd58be91",
        "megatron/cache/025a4414d3ffe5dfa05bc70013384566-GPTDataset-train-sample_index.npy": "a83c7228c85afd4016032e23e84a081a7adbc045af3981266ca58712af170141",
        "megatron/cache/025a4414d3ffe5dfa05bc70013384566-GPTDataset-train-shuffle_index.npy": "7c51ffd2f6db4a6d11cf62d79f8aa2daec8d30a5c76d8c8a06f0c05702f4a07e",
        "megatron/cache/09942fc234f3bfd7b1562144081f4d26-BlendedDataset-train-dataset_index.npy": "c343bb26c7d720ac4e6666a44141f1b210d90005be61ed05d2f63be1db958962",
        "megatron/cache/09942fc234f3bfd7b1562144081f4d26-BlendedDataset-train-dataset_sample_index.npy": "9cb493aaf7c5a6ce2bf7deea99442de7210296138ff35ce85109a27623ee17c7",
        "megatron/cache/09942fc234f3bfd7b1562144081f4d26-BlendedDataset-train-description.txt": "290c4ec06df3c6f3538434373ab4726c3c4e2f540e8846ce822ab99a4a5c4b6b",
        "megatron/cache/6161b7d18ab7893a7fc799e262f5a8de-GPTDataset-train-description.txt": "c9a9d9f183a588f3f18aed581f924f382e5bf6648e9589b334efbd8bc58dfa17",
        "megatron/cache/6161b7d18ab7893a7fc799e262f5a8de-GPTDataset-train-document_index.npy": "be16a41b4a912174f891416815acf30ff63a4a22aaeb13f934387855d60cd39b",
        "megatron/cache/6161b7d18ab7893a7fc799e262f5a8de-GPTDataset-train-sample_index.npy": "207722339ed0abd3575599c90ebf39cd714f0f6c0d5b41b155e68bb59feb0bf8",
        "megatron/cache/6161b7d18ab7893a7fc799e262f5a8de-GPTDataset-train-shuffle_index.npy": "7b4c7a5f80b0881f8ea21af1c97db0bd7237b23f6a74c398f015afaf8d199766",
        "megatron/cache/9141dbf0a35e22b2a2215afa3e6bbed3-GPTDataset-train-description.txt": "3acb7360965c6a874a95f80c59a805e72da0b57f78700355ba388127c5d97133",
        "megatron/cache/9141dbf0a35e22b2a2215afa3e6bbed3-GPTDataset-train-document_index.npy": "ede0e448e552868cf237d0e8c2ef6c16dc8ab530764eb123695c6ce9cd58be91",
        "megatron/cache/9141dbf0a35e22b2a2215afa3e6bbed3-GPTDataset-train-sample_index.npy": "a83c7228c85afd4016032e23e84a081a7adbc045af3981266ca58712af170141",
        "megatron/cache/9141dbf0a35e22b2a2215afa3e6bbed3-GPTDataset-train-shuffle_index.npy": "7c51ffd2f6db4a6d11cf62d79f8aa2daec8d30a5c76d8c8a06f0c05702f4a07e",
        "megatron/cache/95cb31cc65ee9431dea615ec949268f3-GPTDataset-train-description.txt": "0b51bd94d9a1139e9e1ec12b0537aabf145400c5ad4b2f66e298b2a70044acb2",
        "megatron/cache/95cb31cc65ee9431dea615ec949268f3-GPTDataset-train-document_index.npy": "ede0e448e552868cf237d0e8c2ef6c16dc8ab530764eb123695c6ce9cd58be91",
        "megatron/cache/95cb31cc65ee9431dea615ec949268f3-GPTDataset-train-sample_index.npy": "a83c7228c85afd4016032e23e84a081a7adbc045af3981266ca58712af170141",
        "megatron/cache/95cb31cc65ee9431dea615ec949268f3-GPTDataset-train-shuffle_index.npy": "7c51ffd2f6db4a6d11cf62d79f8aa2daec8d30a5c76d8c8a06f0c05702f4a07e",
        "megatron/cache/bed7b351ffffbf5ddfdf029ca057bad4-GPTDataset-train-description.txt": "4dc09cff9d89e09f03be116bfe5f6f9760b5ff0d12440383ea79b25d6b79b33e",
        "megatron/cache/bed7b351ffffbf5ddfdf029ca057bad4-GPTDataset-train-document_index.npy": "be16a41b4a912174f891416815acf30ff63a4a22aaeb13f934387855d60cd39b",
        "megatron/cache/bed7b351ffffbf5ddfdf029ca057bad4-GPTDataset-train-sample_index.npy": "207722339ed0abd3575599c90ebf39cd714f0f6c0d5b41b155e68bb59feb0bf8",
        "megatron/cache/bed7b351ffffbf5ddfdf029ca057bad4-GPTDataset-train-shuffle_index.npy": "7b4c7a5f80b0881f8ea21af1c97db0bd7237b23f6a74c398f015afaf8d199766",
        "megatron/cache/c8a5aec78dfa4993bfdef6025b4590e8-BlendedDataset-train-dataset_index.npy": "c343bb26c7d720ac4e6666a44141f1b210d90005be61ed05d2f63be1db958962",
        "megatron/cache/c8a5aec78dfa4993bfdef6025b4590e8-BlendedDataset-train-dataset_sample_index.npy": "9cb493aaf7c5a6ce2bf7deea99442de7210296138ff35ce85109a27623ee17c7",
        "megatron/cache/c8a5aec78dfa4993bfdef6025b4590e8-BlendedDataset-train-description.txt": "3e32ede2aa79298464d43c311a9c2546bb183a633c82907494d46bb8b15a4daf",
        "megatron/cache/cdec7320bc754bfd2f41f41420dc6941-GPTDataset-train-description.txt": "e0ab1625b3cb7c6096e1e304580f6b9df2e1c4f239224f7b7f5b023fe6e04845",
        "megatron/cache/cdec7320bc754bfd2f41f41420dc6941-GPTDataset-train-document_index.npy": "be16a41b4a912174f891416815acf30ff63a4a22aaeb13f934387855d60cd39b",
        "megatron/cache/cdec7320bc754bfd2f41f41420dc6941-GPTDataset-train-sample_index.npy": "207722339ed0abd3575599c90ebf39cd714f0f6c0d5b41b155e68bb59feb0bf8",
        "megatron/cache/cdec7320bc754bfd2f41f41420dc6941-GPTDataset-train-shuffle_index.npy": "7b4c7a5f80b0881f8ea21af1c97db0bd7237b23f6a74c398f015afaf8d199766",
        "megatron/cache/dc4e1990ec555a33194d66e2d668a80c-BlendedDataset-train-dataset_index.npy": "c343bb26c7d720ac4e6666a44141f1b210d90005be61ed05d2f63be1db958962",
        "megatron/cache/dc4e1990ec555a33194d66e2d668a80c-BlendedDataset-train-dataset_sample_index.npy": "9cb493aaf7c5a6ce2bf7deea99442de7210296138ff35ce85109a27623ee17c7",
        "megatron/cache/dc4e1990ec555a33194d66e2d668a80c-BlendedDataset-train-description.txt": "051eb75316ef140e986237daed50518ac36e41d53dbafc0c908afe93bef8b2b3",
        "megatron/data-args-main.txt": "ab937197480f330c61216c2a4fc8eb294508b2a849543d8ea3f4c9ba3192ab8e",
        "megatron/export.json": "b2b369904d6954c61c6e3c83e9759639dee5beb2ce99c7f96f8819054d928ad1",
        "megatron/megatron.txt": "d1a91c82dce8e2a982a869db9fc54b65a41391457d95cd11d0b97b8aa21a5f06",
        "mixes/prose-code-flat/manifest.blocks": "1d6ade4b63f3ea417e731b4af78354757c8c57a29c9cd5bd4fe76af1abab519a",
        "mixes/prose-code-flat/manifest.shards": "a86ae3c1be212c9c03e42e89c6623b267f660d1272a1d53e5d8cf51c0fe4f825",
        "mixes/prose-code-flat/shards/mix-00000.bin": "221720efb94bbb9fcd5c9416df6825eb72704a7c91c19bf6447b3ef6a2b9c204",
        "mixes/prose-code-flat/shards/mix-00000.idx": "b9833e459f0ea9dc5dc13926ddcb01ed806dac667ae5cca5f8b15b59e7f1fbb1",
        "mixes/prose-code/exports/nanotron/000-prose/.pool": "31f549700b0c621ea685462596b0085fab50d196c49d8cc1e8f1def439e373a2",
        "mixes/prose-code/exports/nanotron/000-prose/pool-00000.ds.index": "69dfbc16618d72da98aae47a90e1caa43308a70e0d88dce6c8f45baf0395822f",
        "mixes/prose-code/exports/nanotron/000-prose/pool-00000.ds.metadata": "f3ec53d1ecf604337436906a87f41ac7a35ef7b5c4f16ef94a21ed4473b0dddc",
        "mixes/prose-code/exports/nanotron/001-code/.pool": "518feb239bc77340cd9688d399f69804d099f776528f566ce6ed6759dba07889",
        "mixes/prose-code/exports/nanotron/001-code/pool-00000.ds.index": "5db1a1fd8d16959ad7cb76a7571512fd60a9ad62915daa8726f789fc0d079962",
        "mixes/prose-code/exports/nanotron/001-code/pool-00000.ds.metadata": "43862e309ce39f85b6d134a205a6ace21d92ad02b3f3c188cc7344f61c3665ab",
        "mixes/prose-code/manifest.blocks": "cb06cf4cf536dc65172eb55a1aca97396fdb4ac09276dd05e677b46d66a850dd",
        "mixes/prose-code/manifest.shards": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "mixes/prose-code/schedule/counts.npy": "a8a6b2856ba7d8577ef3a0ec2515f4d464143f88f7b5c891abdbe29317a4f12a",
        "mixes/prose-code/schedule/pool.npy": "c343bb26c7d720ac4e6666a44141f1b210d90005be61ed05d2f63be1db958962",
        "mixes/prose-code/schedule/record.npy": "9cb493aaf7c5a6ce2bf7deea99442de7210296138ff35ce85109a27623ee17c7",
        "nanotron.yaml": "a1defd1cdc9f56bde542ff51f7acddd01d0b672764cd530e7c67322fee251880",
        "olmo-exact.yaml": "f983e6f407cbdb993ade2f37887c37ff49479ae3e76e1bba6126a8dbc3327b91",  # names the copy's fingerprint
        "olmo.yaml": "6c14cb620627f983e9093d935b1450c5ffb2d7c7ecb47e75d011463f97c2b0c0",
        "pools/code/documents.parquet": "d0d6a69624636c743186bf359a881a588536c9213684499889386a40d2921324",
        "pools/code/manifest.blocks": "4772ba0e7de7fba357a39dc5fb01c8d675140e796fbfa9ed114037f03e7a29d9",
        "pools/code/manifest.shards": "f1185cfb44c5381dd14aa358c41bd7084c218414a728792428404ee27839dd39",
        "pools/code/shards/pool-00000.bin": "2e7aa7a62dde7c085bd91f2de832c1bc40f9cbc35a7b17ca669b1e2be80a4875",
        "pools/code/shards/pool-00000.docs.parquet": "a771f429ed1298165efe69024ca3b4831424425aa53723878171cf6a935c2dc5",
        "pools/code/shards/pool-00000.idx": "c0728a1c9e721fab0fae4a665df3ac9b064b487293db0de243fffd2e0352c4ee",
        "pools/code/shards/pool-00000.segments.npz": "ec6df7327514dc0b84187f0c409dfc8c48f91727a6457b7f53d71fd08647836b",
        "pools/prose/documents.parquet": "33616d0917fb2f4850804ce5d5e6b9ea64eb24620f68cdc150747dbddfc32922",
        "pools/prose/manifest.blocks": "5ddf6c4093a434be1ddc61227f392888f099d0adb40957e3b184115458584c06",
        "pools/prose/manifest.shards": "8bc13577fdf8cab9694362217ab96ca098bb8be717c327505e7c65f4bd4eb8d2",
        "pools/prose/shards/pool-00000.bin": "53cf052c6d3142ccd644f880fae004119f126ce80bb275f3bd312370946173b4",
        "pools/prose/shards/pool-00000.docs.parquet": "8df75b665886558b75fdfb156ba07bfa5cc90421cf555bd8009de99b2cb7ab1e",
        "pools/prose/shards/pool-00000.idx": "09c8dce14401a43c4b6368192413ca0f1ad1ae5807d7fb48463e1ed6bedb8af9",
        "pools/prose/shards/pool-00000.segments.npz": "9643e9c2c6fdf76ee4bbc0c4128cf45c64fd3f13ec77efe9c3dab5d9acb3de9f",
        "pools/prose/val/documents.parquet": "de5d066c7b4aedec89b61be8c8e7ad89ad81c41f0a6a8889ffe5a882b75411e9",
        "pools/prose/val/manifest.blocks": "f3fdd52e290bd5606a6d6e13ac96282733bed548d304923cec3ea87fd6c1b723",
        "pools/prose/val/manifest.shards": "779f016b82f2262b22c1735bb1d9a195b45082f6e232e4c3971c5aaa92ca04c5",
        "pools/prose/val/shards/pool-00000.bin": "7dcca0da019264a7c886e2151c4fe98a891fd1a090f1eabd2bc838c49b6d503a",
        "pools/prose/val/shards/pool-00000.docs.parquet": "33670630fa94ea22d9c77936aff284f892ec0c7a39b7a43e07cc36e7b63ddad1",
        "pools/prose/val/shards/pool-00000.idx": "dfc577285c416471ca3178f7d7689ddd8abe027a7d0cb226f124eba3d2d7463d",
        "pools/prose/val/shards/pool-00000.segments.npz": "0c63da45d7964a1ce57bc6bce2dd0a398d2bbdc71f04a78e1c0c185fd83fa937",
        "quality-mix.txt": "e70976216e22f83d996bdd0cd941b06063fa0066066b793f578e9a57f590884f",
        "quality-prose.txt": "eba763ff7c45f0d9c774261ac9f13b5e1811ede1e93fc5cf930ffe85d726c513",
        "tok/code/manifest.blocks": "8643c19f6e521eb2f925b5ccc198e7cdc5f57987d9f20d16e2058ce751605ea6",
        "tok/code/manifest.shards": "1a49fbde667df994cc9fd268ca9d4f28fe675e576dfd8eb46baf9b570b1282e6",
        "tok/code/shards/shard-00000.bin": "6e165331cb131e6ed3793baaaf38321e4b971135530883eec735ab6665110911",
        "tok/code/shards/shard-00000.docs.parquet": "78fd7ca477fc832c6ebe9cd8f2c12d420913e86feda6a7f91dd5e0c370e9ddd4",
        "tok/code/shards/shard-00000.idx": "92887aab0ca76491a10afe0602b53d56ebb30146ef80ad80d8c18e66a78ca972",
        "tok/docstrings/manifest.blocks": "f9f15b14758edf11ef86abb3abd2007b0c7665584e11bf3e59681da1e587df31",
        "tok/docstrings/manifest.shards": "d21eb081eae1c55cf7b69ca2659e643c8d648fab9f0d310fc61770e3b4a26890",
        "tok/docstrings/shards/shard-00000.bin": "0731446a2468701403829e7c1c364a367deb673c429a0449e3c6358549c52ce8",
        "tok/docstrings/shards/shard-00000.docs.parquet": "aa0ef0a68f92f8b9e21b29f56794ad43f6cfdd31a85aa4c9059409683ec3f229",
        "tok/docstrings/shards/shard-00000.idx": "2148cdc51bee2064fe112ef391a69cbe5dedad62b0bed0a334110a36af8009d1",
        "tok/reference/manifest.blocks": "1e4d003c136960bb32bf0d68bb149478bedb7abbc8988f711887ee3d92c2aa90",
        "tok/reference/manifest.shards": "306582a2acf113c48e5a29d87f13060f25507b317dc3687d8f9e24fdf20382b2",
        "tok/reference/shards/shard-00000.bin": "05abd656336f9a50715cbd263a77eafc17090cd7705941cfe8cb8dd9c3a61c99",
        "tok/reference/shards/shard-00000.docs.parquet": "034f2bc0ec16e13f28e6369e86fa09831d992ed8660ea225278947db026466c4",
        "tok/reference/shards/shard-00000.idx": "76c0f1f745c3dbe9a1a847801a060eb9f1a829be6526fcd1a8547a84ba078c00",
    },
}


def _digest(value) -> str:
    return xxhash.xxh3_128_hexdigest(
        json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    )


def _entries(manifest: dict) -> list[tuple]:
    from shardcore import manifest as mf

    return sorted((e["path"], e["size"], e["xxh3"]) for e in mf.file_entries(manifest))


def _said(manifest: dict) -> dict:
    """What a manifest says but its file list, in any format: format 3's header without
    its layout (the table's offsets and checksums), its shards and cumulative records as
    the lists format 2 held."""
    from shardcore import manifest as mf

    said = {k: v for k, v in manifest.items() if k not in ("files", mf.LAYOUT)}
    for key in ("shards", "cumulative_records"):
        if key in said:
            said[key] = [dict(v) if isinstance(v, dict) else int(v) for v in said[key]]
    return said


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def observe(code: Path, work: Path) -> dict:
    """Run the walk-through with the shardcore of ``code`` in ``work``; what it built."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(code), "SHARDYARD_CACHE": str(work / "cache")}
    py = sys.executable

    def run(args: list[str], **kw) -> None:
        r = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, **kw)
        assert r.returncode == 0, f"{args}: {r.stderr[-2000:]}"

    run(
        [
            py,
            "-c",
            "from shardcore.demo import build_demo_corpus; "
            f"build_demo_corpus('corpus', max_bytes_per_source={CORPUS_BYTES})",
        ]
    )
    corpus = {}
    for f in sorted((work / "corpus").rglob("*")):
        if f.is_file():
            os.utime(f, (MTIME, MTIME))
            corpus[f.relative_to(work).as_posix()] = _sha256(f)
    cli = f"{py} -m shardcore.cli"
    for command in COMMANDS:
        run(["/bin/sh", "-c", f"{cli} {command}"])
    shutil.rmtree(work / "cache", ignore_errors=True)  # compiled kernels: not output

    artifacts, files = {}, {}
    from shardcore import manifest as mf

    for manifest_path in sorted(work.rglob("manifest.json")):
        rel = manifest_path.parent.relative_to(work).as_posix()
        m = mf.read_manifest(manifest_path.parent)
        artifacts[rel] = {
            "fingerprint": m["fingerprint"],
            "manifest": _digest(_said(m)),
            "files": _digest(_entries(m)),
        }
    for f in sorted(work.rglob("*")):
        rel = f.relative_to(work).as_posix()
        if f.is_file() and not f.is_symlink() and f.name != "manifest.json":
            if "/_units/" in f"/{rel}" or rel.startswith("corpus/") or f.name == "_plan.json":
                # unit markers hold timings, a plan is a build's work list (not its
                # output), the corpus is pinned as a whole
                continue
            files[rel] = _sha256(f)
    return {"corpus": _digest(corpus), "artifacts": artifacts, "files": files}


@contextlib.contextmanager
def _fixed_workdir():
    WORK.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{WORK}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield WORK
        finally:
            shutil.rmtree(WORK, ignore_errors=True)


def test_the_walkthrough_builds_the_pinned_bytes() -> None:
    if platform.python_version() != PINNED_PYTHON:
        pytest.skip(
            f"pinned on the standard library of Python {PINNED_PYTHON}, "
            f"this is {platform.python_version()}"
        )
    with _fixed_workdir() as work:
        seen = observe(ROOT, work)
    assert seen["corpus"] == PINNED["corpus"], "the demo corpus changed: its text differs"
    assert set(seen["artifacts"]) == set(PINNED["artifacts"])
    for rel, pinned in PINNED["artifacts"].items():
        for what in ("fingerprint", "manifest", "files"):
            assert seen["artifacts"][rel][what] == pinned[what], f"{rel}: {what} changed"
    assert sorted(seen["files"]) == sorted(PINNED["files"])
    changed = [rel for rel, sha in PINNED["files"].items() if seen["files"][rel] != sha]
    assert changed == [], f"bytes changed: {changed}"


if __name__ == "__main__":
    code = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    with _fixed_workdir() as work:
        print(json.dumps(observe(code, work), indent=1, sort_keys=True))
