"""The fork tree laid out for drawing: one node per thread, one edge per fork.

Threads are placed depth first in creation order (a parent above its forks, siblings in
the order they were made), one row each, indented by depth; an edge runs from the parent's
node to the fork's and is labelled with the fork offset. The template draws it as SVG.
"""

from __future__ import annotations

from dataclasses import dataclass

from eventstore import ThreadInfo

ROW = 44  # px between rows
INDENT = 56  # px per level of depth
NODE_WIDTH = 360
NODE_HEIGHT = 30


@dataclass(frozen=True, slots=True)
class Node:
    info: ThreadInfo
    title: str | None  # its own title: None when it has none, or only its parent's
    x: int
    y: int

    @property
    def label(self) -> str:
        """What the node reads: its own title, else its id."""
        return self.title or self.info.id


@dataclass(frozen=True, slots=True)
class Edge:
    parent: Node
    child: Node
    offset: int


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def layout(threads: list[ThreadInfo], titles: dict[str, str | None]) -> Graph:
    """`threads`: a root and its subtree in creation order (as `Store.subtree` gives them)."""
    known = {info.id for info in threads}
    kids: dict[str | None, list[ThreadInfo]] = {}
    for info in threads:
        kids.setdefault(info.parent_id if info.parent_id in known else None, []).append(info)
    nodes: dict[str, Node] = {}
    stack = list(reversed(kids.get(None, [])))
    while stack:
        info = stack.pop()
        # A fork keeps its parent's title: sibling sub-agents read the same but for their ids.
        title = titles.get(info.id)
        own = None if info.parent_id in known and title == titles.get(info.parent_id) else title
        nodes[info.id] = Node(info, own, 8 + INDENT * info.depth, 8 + ROW * len(nodes))
        stack.extend(reversed(kids.get(info.id, [])))
    edges = [Edge(nodes[n.info.parent_id], n, n.info.parent_offset or 0)
             for n in nodes.values() if n.info.parent_id is not None and n.info.parent_id in nodes]
    depth = max((info.depth for info in threads), default=0)
    return Graph(list(nodes.values()), edges, 16 + INDENT * depth + NODE_WIDTH, 16 + ROW * len(nodes))
