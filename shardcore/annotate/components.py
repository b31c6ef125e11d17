"""Connected components of a graph too large for one process, in units with a memory
budget: the near-duplicate clusters of ``shardcore.annotate.neardup``.

Nodes are the integers ``0 .. n-1`` (documents), cut into ``parts`` ranges of consecutive
nodes (``part_of``). Edges arrive as adjacency files, each node's half-edges ``(node,
neighbour)`` filed under the node's range (``adjacency``; the producer writes one file per
range, both directions of every edge). Only nodes with an edge take part: a node without
one is a cluster of its own, of size 1.

Labels by delta propagation, one phase per round (``run_round``): every node starts as its
own label; in each round a range's unit takes the smallest label its nodes were sent, keeps
those that fell, and sends each fallen node's new label to its neighbours (filed under
their ranges). A label only falls, so it ends as the smallest node of the component; only
changed nodes send, so the rounds thin out, and a unit whose range was sent nothing reads
nothing but what it was sent. Each round's labels are a file per range, written only when
some fell (round 1's always, with the range's half-edges); each round's unit writes its
sent file, empty when nothing fell: what a unit reads is known before it runs (its
predecessor's stats name the round of its range's labels), so that on object storage it
fetches exactly those files (``shardcore.annotate.neardup.range_reads``).

The number of rounds is fixed when planned (``ROUNDS``): a component whose diameter is
larger has messages still on the way after the last round. ``run_resolve`` finishes it in
one unit holding only those messages: an edge whose two ends disagree always has one in
flight (an end sends whenever its label falls; the other end, on receipt, falls to it or
below), so the components of the labels joined by those messages are the rest of the
graph's, and their smallest label is the answer.

Then the clusters' sizes and each node's rank in its cluster (by node number): per range
the labels counted (``run_count``, filed under the label's range), per label range the
counts summed in range order (``run_tally``: each label's size and, for each range, how
many of its nodes lie in earlier ranges), and ``cluster_columns`` for any run of nodes:
cluster, size, rank, reading only the ranges that run covers.

Memory per unit: one range's half-edges (16 bytes each) and labels (16 bytes per node with
an edge), plus what it is sent; files: parts x parts per round (the next limit at 10^4
ranges). Every unit writes its files under temporary names renamed into place and derives
them from its inputs only, so a killed unit reruns to the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from shardcore import atomic
from shardcore.annotate.dedup import _components

# Rounds of label propagation before the rest is resolved in one unit: near-duplicate
# clusters are stars joined at their bands' first documents (diameter 2-4 in practice).
ROUNDS = 6
_EMPTY = np.empty((2, 0), dtype=np.int64)


def part_of(nodes: np.ndarray, n: int, parts: int) -> np.ndarray:
    """The range of each node: ``node * parts // n`` (ranges of consecutive nodes)."""
    return (np.asarray(nodes, dtype=np.int64) * parts) // max(n, 1)


def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def _cuts_path(path: Path) -> Path:
    return path.with_name(path.name[: -len(".npy")] + ".cuts.npy")


def file_split(path: Path, rows: np.ndarray, where: np.ndarray, parts: int) -> None:
    """Write the columns ``rows`` (k x m) sorted by their range ``where`` (stable) as one
    file, and beside it where each range's slice starts (``<name>.cuts.npy``): one file a
    writer, whatever the number of ranges, each range's slice read by position
    (``_slices``)."""
    order = np.argsort(where, kind="stable")
    _save(path, np.ascontiguousarray(rows[:, order]))
    _save(_cuts_path(path), np.searchsorted(where[order], np.arange(parts + 1)))


def _slices(paths: Iterable[Path], q: int) -> np.ndarray:
    """Range q's slice of each of ``paths`` (``file_split``'s; a missing one: nothing was
    sent), joined."""
    got = []
    for path in paths:
        if not path.exists():
            continue
        cuts = np.load(_cuts_path(path))
        got.append(np.array(np.load(path, mmap_mode="r")[:, cuts[q] : cuts[q + 1]]))
    return np.concatenate(got, axis=1) if got else _EMPTY


class Components:
    """The files of one component computation under ``work`` over ``n`` nodes in
    ``parts`` ranges, with ``sources`` adjacency producers (their files
    ``adj/<s>.npy``, split by range: ``file_split``)."""

    def __init__(self, work: Path, n: int, parts: int, sources: int):
        self.work, self.n, self.parts, self.sources = Path(work), int(n), int(parts), int(sources)

    def part(self, nodes: np.ndarray) -> np.ndarray:
        """The range of each of ``nodes``."""
        return part_of(nodes, self.n, self.parts)

    # -- paths
    def adjacency_file(self, source: int) -> Path:
        return self.work / "adj" / f"{source}.npy"

    def range_adjacency_file(self, q: int) -> Path:
        """Range q's half-edges, sorted by node (round 1 writes them: a later round reads
        its range's file, not a slice of every producer's)."""
        return self.work / "range_adj" / f"q{q}.npy"

    def split_files(self, path: Path) -> list[Path]:
        """A ``file_split`` file and its cuts."""
        return [path, _cuts_path(path)]

    def labels_path(self, r: int, q: int) -> Path:
        return self.work / "labels" / f"r{r}" / f"q{q}.npy"

    def sent_path(self, r: int, src: int) -> Path:
        return self.work / "sent" / f"r{r}" / f"{src}.npy"

    def final_path(self, q: int) -> Path:
        return self.work / "final" / f"q{q}.npy"

    def count_path(self, q: int) -> Path:
        return self.work / "count" / f"{q}.npy"

    def tally_path(self, lq: int) -> Path:
        return self.work / "tally" / f"{lq}.npy"

    def resolved_path(self) -> Path:
        return self.work / "resolved.npy"

    # -- propagation
    def adjacency(self, q: int) -> np.ndarray:
        """Range q's half-edges (node, neighbour), sorted by node: the file round 1 wrote
        of them when there is one, else range q's slice of every producer's file."""
        path = self.range_adjacency_file(q)
        if path.exists():
            return np.load(path)
        adj = _slices((self.adjacency_file(s) for s in range(self.sources)), q)
        return adj[:, np.argsort(adj[0], kind="stable")]

    def latest_labels(self, r: int, q: int) -> int:
        """The latest round up to r that wrote range q's labels (0: none did)."""
        for k in range(r, 0, -1):
            if self.labels_path(k, q).exists():
                return k
        return 0

    def labels(self, r: int, q: int, adj: np.ndarray | None = None) -> np.ndarray:
        """Range q's (node, label) after round r (the latest round that changed it),
        sorted by node; round 0: every node with an edge, its own label (from ``adj``,
        the range's adjacency, when given)."""
        k = self.latest_labels(r, q)
        if k:
            return np.load(self.labels_path(k, q))
        nodes = np.unique((self.adjacency(q) if adj is None else adj)[0])
        return np.stack([nodes, nodes])

    def run_round(self, r: int, q: int) -> dict[str, int]:
        """Round r (1-based) for range q: take what it was sent, keep the labels that fell,
        send them on. Every round's unit writes its sent file (empty when nothing fell),
        and round 1 its range's labels and adjacency (empty or not), so that what a later
        unit reads is known before it runs: the sent files of the round before, the
        labels of the round its predecessor names (``labels`` in the stats: the latest
        round that wrote the range's labels) and the range's adjacency."""
        adj = None
        if r == 1:  # round 0 sent every node its neighbours' labels: its adjacency
            adj = self.adjacency(q)
            _save(self.range_adjacency_file(q), adj)
            inbox = adj
        else:
            inbox = _slices((self.sent_path(r - 1, s) for s in range(self.parts)), q)
            inbox = inbox[:, np.argsort(inbox[0], kind="stable")]
        if not inbox.shape[1]:
            if r == 1:
                _save(self.labels_path(r, q), self.labels(0, q, adj))
            return self._unchanged(r, q)
        # the smallest label sent to each node (the inbox is sorted by node)
        to, starts = np.unique(inbox[0], return_index=True)
        value = np.minimum.reduceat(inbox[1], starts)
        del inbox
        labels = self.labels(r - 1, q, adj).copy()
        at = np.searchsorted(labels[0], to)
        fell = value < labels[1][at]
        at = at[fell]
        labels[1][at] = value[fell]
        del to, value, fell
        if len(at) or r == 1:  # round 1's always: no later unit reads the adjacency for it
            _save(self.labels_path(r, q), labels)
        if not len(at):
            return self._unchanged(r, q)
        adj = self.adjacency(q) if adj is None else adj
        # every half-edge of a node whose label fell carries the new label to its neighbour
        lo = np.searchsorted(adj[0], labels[0][at])
        counts = np.searchsorted(adj[0], labels[0][at], side="right") - lo
        idx = np.repeat(lo - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(counts.sum())
        out = np.stack([adj[1][idx], np.repeat(labels[1][at], counts)])
        del adj, idx
        file_split(self.sent_path(r, q), out, self.part(out[0]), self.parts)
        return {"changed": int(len(at)), "sent": int(out.shape[1]), "labels": r}

    def _unchanged(self, r: int, q: int) -> dict[str, int]:
        """A round whose range q kept its labels: it sends nothing (an empty file)."""
        file_split(self.sent_path(r, q), _EMPTY, np.empty(0, np.int64), self.parts)
        return {"changed": 0, "sent": 0, "labels": self.latest_labels(r, q)}

    # -- the rest, and the answer
    def run_resolve(self, rounds: int) -> dict[str, int]:
        """Join the labels that the messages still in flight after ``rounds`` rounds
        connect; the smallest of each joined set is its answer (``resolved.npy``: label,
        answer, for the labels that change)."""
        pending = [
            _slices((self.sent_path(rounds, s) for s in range(self.parts)), q)
            for q in range(self.parts)
        ]
        a, b = [], []
        for q, sent in enumerate(pending):
            if not sent.shape[1]:
                continue
            labels = self.labels(rounds, q)
            a.append(labels[1][np.searchsorted(labels[0], sent[0])])
            b.append(sent[1])
        mapping = _EMPTY
        if a:
            ends = np.concatenate([np.concatenate(a), np.concatenate(b)])
            ids, inverse = np.unique(ends, return_inverse=True)
            half = len(ends) // 2
            roots = _components(len(ids), inverse[:half], inverse[half:])
            moved = roots != np.arange(len(ids))
            mapping = np.stack([ids[moved], ids[roots[moved]]])
        _save(self.resolved_path(), mapping)
        return {"pending": int(sum(s.shape[1] for s in pending)), "resolved": mapping.shape[1]}

    def run_count(self, rounds: int, q: int) -> dict[str, int]:
        """Range q's final labels, and its nodes counted per label (filed under the label's
        range)."""
        labels = self.labels(rounds, q)
        mapping = np.load(self.resolved_path())
        if mapping.shape[1] and labels.shape[1]:
            at = np.minimum(np.searchsorted(mapping[0], labels[1]), mapping.shape[1] - 1)
            hit = mapping[0][at] == labels[1]
            labels = labels.copy()
            labels[1][hit] = mapping[1][at[hit]]
        _save(self.final_path(q), labels)
        values, counts = np.unique(labels[1], return_counts=True)
        rows = np.stack([values, counts.astype(np.int64)])
        file_split(self.count_path(q), rows, self.part(values), self.parts)
        return {"clustered": int(labels.shape[1])}

    def run_tally(self, lq: int) -> dict[str, int]:
        """For the labels of range lq: each one's size, and for each range q the number of
        its nodes in ranges before q (``tally/<lq>.npy`` by range q: label, before, size)."""
        counts = [_slices([self.count_path(q)], lq) for q in range(self.parts)]
        label = np.concatenate([c[0] for c in counts])
        count = np.concatenate([c[1] for c in counts])
        q_of = np.repeat(np.arange(self.parts), [c.shape[1] for c in counts])
        order = np.lexsort((q_of, label))  # by label, ranges in order
        label, count, q_of = label[order], count[order], q_of[order]
        start = np.r_[True, label[1:] != label[:-1]] if len(label) else np.empty(0, bool)
        run = np.cumsum(start) - 1
        total = np.bincount(run, weights=count).astype(np.int64) if len(label) else count
        running = np.cumsum(count) - count
        before = running - running[np.flatnonzero(start)][run] if len(label) else count
        rows = np.stack([label, before, total[run] if len(label) else count])
        file_split(self.tally_path(lq), rows, q_of, self.parts)  # label order in each range
        return {"clusters": int(start.sum())}

    def cluster_columns(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nodes ``[lo, hi)``'s cluster (its smallest node), size and rank in it."""
        cluster = np.arange(lo, hi, dtype=np.int64)
        size = np.ones(hi - lo, dtype=np.int64)
        rank = np.zeros(hi - lo, dtype=np.int64)
        if hi <= lo:
            return cluster, size, rank
        first, last = part_of(np.array([lo, hi - 1]), self.n, self.parts)
        for q in range(int(first), int(last) + 1):
            final = np.load(self.final_path(q))
            tally = _slices((self.tally_path(lq) for lq in range(self.parts)), q)
            tally = tally[:, np.argsort(tally[0], kind="stable")]
            # rank inside the range: by label, then node (final is sorted by node)
            order = np.lexsort((final[0], final[1]))
            lab = final[1][order]
            start = np.r_[True, lab[1:] != lab[:-1]] if len(lab) else np.empty(0, bool)
            head = np.maximum.accumulate(np.where(start, np.arange(len(lab)), 0))
            local = np.empty(len(lab), dtype=np.int64)
            local[order] = np.arange(len(lab)) - head
            at = np.searchsorted(tally[0], final[1])
            sel = (final[0] >= lo) & (final[0] < hi)
            pos = final[0][sel] - lo
            cluster[pos] = final[1][sel]
            size[pos] = tally[2][at[sel]]
            rank[pos] = tally[1][at[sel]] + local[sel]
        return cluster, size, rank
