"""Where each waiting workload stands in its ClusterQueue: kept while a queue's waiting set
is unchanged, asked of Kueue's visibility API for the queues that changed (Kueue's own order,
"computed", where it does not answer), and stored only if still current."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from tenants.bulk import update_rows

from ..kube import KubeBackend, KubeError
from ..models import QueueWorkload
from ..vocabulary import KUEUE_VISIBILITY as VISIBILITY
from .order import kueue_order, line_up
from .reading import INTERIM
from .truth import WorkloadFacts

POSITION_THREADS = 8  # visibility calls in flight at once (each is a round trip, little work)


def positions_kept(pending: dict[str, list[WorkloadFacts]],
                    known: dict[str, tuple[str, int | None, str]]
                    ) -> tuple[dict[str, tuple[int, str]], list[str]]:
    """(uid → (position, source) to store now, the ClusterQueues to ask again). A queue
    whose waiting set is unchanged keeps the positions read before (one visibility call per
    changed queue, not per queue). In a changed queue, a workload keeps its stored position
    until the answer comes (no flapping), and a new one is placed in Kueue's order (0 is next
    in its ClusterQueue) as an interim position."""
    out: dict[str, tuple[int, str]] = {}
    ask = []
    for cq, workloads in pending.items():
        uids = {w.uid for w in workloads}
        before = {uid: (pos, src) for uid, (q, pos, src) in known.items() if q == cq}
        if set(before) == uids and all(p is not None and src != INTERIM
                                       for p, src in before.values()):
            out.update(before)
            continue
        ask.append(cq)
        for i, w in enumerate(sorted(workloads, key=kueue_order)):
            pos, src = before.get(w.uid, (None, ""))
            out[w.uid] = (pos, src) if pos is not None and src != INTERIM else (i, INTERIM)
    return out, ask


def visibility_positions(backend: KubeBackend, pending: dict[str, list[WorkloadFacts]],
                          ask: list[str]) -> dict[str, tuple[int, str]]:
    """uid → (position, source) for every waiting workload of the queues in `ask`, in the
    one order of `fleet.queues.order.line_up`: Kueue's visibility API's where it answers,
    then Kueue's order for the rest ("computed"); positions are ranks. Calls go one at a
    time until one answers (after three failures in a row the API is not asked again in
    this pass: it is not there), then the rest in parallel; an error is no answer."""
    def get(cq: str) -> dict | None:
        try:
            return backend.get_path(VISIBILITY.format(cq))
        except KubeError:
            return None

    ask = list(ask)
    answers: dict[str, dict | None] = {}
    failures = 0
    while ask and failures < 3 and not any(answers.values()):
        cq = ask.pop(0)
        answers[cq] = get(cq)
        failures = 0 if answers[cq] is not None else failures + 1
    if ask and any(answers.values()):
        with ThreadPoolExecutor(max_workers=POSITION_THREADS) as pool:
            answers.update(zip(ask, pool.map(get, ask), strict=True))
    out: dict[str, tuple[int, str]] = {}
    for cq in [*answers, *ask]:
        out.update((p.facts.uid, (p.position, p.source)) for p in line_up(
            pending[cq], answered_positions(answers.get(cq), pending[cq])))
    return out


def answered_positions(answer: dict | None, waiting: list[WorkloadFacts]) -> dict[str, int]:
    """uid → positionInClusterQueue of the waiting workloads a visibility answer lists."""
    by_key = {(w.namespace, w.name): w.uid for w in waiting}
    out = {}
    for item in (answer or {}).get("items") or []:
        meta = item.get("metadata") or {}
        uid = by_key.get((meta.get("namespace"), meta.get("name")))
        pos = item.get("positionInClusterQueue")
        if uid is not None and isinstance(pos, int) and not isinstance(pos, bool):
            out[uid] = pos
    return out


def positions_source(positions: dict[str, tuple[int, str]]) -> str:
    return "+".join(sorted({src for _pos, src in positions.values()}))


def store_positions(positions: dict[str, tuple[int, str]],
                     asked: dict[str, set[str]]) -> set[str]:
    """Write the positions of each asked queue whose waiting set is still the one asked
    about (a reader that started later may have moved on: its answer is the newer one);
    the uids written."""
    rows = list(QueueWorkload.objects.filter(
        cluster_queue__any=list(asked), state=QueueWorkload.State.PENDING).only(
        "uid", "cluster_queue", "position", "position_source"))
    waiting: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        waiting[r.cluster_queue].add(r.uid)
    current = {cq for cq, uids in asked.items() if waiting.get(cq, set()) == uids}
    moved = [r for r in rows if r.cluster_queue in current and r.uid in positions
             and (r.position, r.position_source) != positions[r.uid]]
    for r in moved:
        r.position, r.position_source = positions[r.uid]
    update_rows(QueueWorkload, moved, ["position", "position_source"])
    return {r.uid for r in moved}
