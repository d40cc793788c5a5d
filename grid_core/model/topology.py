"""Topology tables of a kinematic tree, computed once offline.

These are the tables patterns P1 (level batching) and P4 (topology helpers) of
seed 000 bake into kernels: the parent array, BFS levels with per-level offsets
and widths, subtree and support (ancestor) sets, and branch groups (maximal
unbranched chains).  Bodies are numbered in Pinocchio's depth-first order with
every parent before its children; the tables never reorder them, they index them.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Topology:
    parent: tuple[int, ...]
    """``parent[i]`` is the parent body of body ``i`` (-1: attached to the world)."""
    children: tuple[tuple[int, ...], ...]
    depth: tuple[int, ...]
    """BFS level of each body: roots are level 0."""
    levels: tuple[tuple[int, ...], ...]
    """Bodies of each level, in body order."""
    subtree: tuple[tuple[int, ...], ...]
    """``subtree[i]``: ``i`` and all its descendants, ascending."""
    support: tuple[tuple[int, ...], ...]
    """``support[i]``: the ancestors of ``i`` from the root down, ``i`` last."""
    branches: tuple[tuple[int, ...], ...]
    """Maximal unbranched chains, each from its top body down."""

    @classmethod
    def from_parents(cls, parent) -> "Topology":
        parent = tuple(int(p) for p in parent)
        n = len(parent)
        for i, p in enumerate(parent):
            if not -1 <= p < i:
                raise ValueError(f"body {i} has parent {p}: parents must precede children")
        children = [[] for _ in range(n)]
        for i, p in enumerate(parent):
            if p >= 0:
                children[p].append(i)
        depth = []
        for i, p in enumerate(parent):
            depth.append(0 if p < 0 else depth[p] + 1)
        n_levels = max(depth) + 1 if n else 0
        levels = tuple(tuple(i for i in range(n) if depth[i] == d) for d in range(n_levels))
        support = []
        for i, p in enumerate(parent):
            support.append((support[p] if p >= 0 else ()) + (i,))
        subtree = [[i] for i in range(n)]
        for i in reversed(range(n)):
            if parent[i] >= 0:
                subtree[parent[i]].extend(subtree[i])
        branches = []
        for i in range(n):
            # a branch starts where the chain above it splits (or at a root)
            p = parent[i]
            if p >= 0 and len(children[p]) == 1:
                continue
            chain = [i]
            while len(children[chain[-1]]) == 1:
                chain.append(children[chain[-1]][0])
            branches.append(tuple(chain))
        return cls(
            parent=parent,
            children=tuple(tuple(c) for c in children),
            depth=tuple(depth),
            levels=levels,
            subtree=tuple(tuple(sorted(s)) for s in subtree),
            support=tuple(support),
            branches=tuple(branches),
        )

    # -- derived views -------------------------------------------------------------

    @property
    def num_bodies(self) -> int:
        return len(self.parent)

    @property
    def num_levels(self) -> int:
        return len(self.levels)

    @property
    def level_widths(self) -> tuple[int, ...]:
        return tuple(len(lv) for lv in self.levels)

    @property
    def level_offsets(self) -> tuple[int, ...]:
        """Start of each level in :attr:`bfs_order` (prefix sums of the widths)."""
        out, acc = [], 0
        for w in self.level_widths:
            out.append(acc)
            acc += w
        return tuple(out)

    @property
    def bfs_order(self) -> tuple[int, ...]:
        """Bodies sorted by level (stable in body order): level ``d`` occupies
        ``bfs_order[level_offsets[d] : level_offsets[d] + level_widths[d]]``."""
        return tuple(i for lv in self.levels for i in lv)

    @property
    def max_level_width(self) -> int:
        return max(self.level_widths, default=0)

    @property
    def leaves(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.children) if not c)

    @property
    def branch_of(self) -> tuple[int, ...]:
        out = [0] * self.num_bodies
        for g, chain in enumerate(self.branches):
            for i in chain:
                out[i] = g
        return tuple(out)

    @property
    def is_chain(self) -> bool:
        return len(self.branches) <= 1

    def is_ancestor(self, a: int, b: int) -> bool:
        """Whether body ``a`` is ``b`` or one of its ancestors."""
        return a in self.support[b]
