"""The store's promises to agents, held by a model: `test_stateful.StoreMachine`'s threads,
messages, forks, redactions and compactions, with what a running agent adds to them.

- runs: `run.started` / `run.finished` appended as events; a fork inside an open run is refused
  (`busy`) unless made with `busy="allow"`, and starts idle either way;
- interrupts raised on a thread (on one of its waiting tool calls, or on none), resolved and
  cancelled: `thread_state` says `running`, `interrupted` or `idle`, a result for a call an
  interrupt waits on is refused, a fork demotes those pending at its fork point, and
  `questions` lists those waiting on a thread and on the sub-agents it launched;
- sub-agents: `fan_out` from a thread waiting on tool calls (each fork answering them with one
  placeholder, then its directive), refused from a sub-agent (`recursion`), from a thread
  waiting on nothing, and for calls whose sub-agents were launched already; `report`, which
  brings a sub-agent's answer to its parent as one `<task-notification>` user message
  answering the calls still waiting, cancelling an interrupt on them in the same write;
- note forks (`context="note"`, with `fork_with_transcript` writing the transcript first): the
  fork's model view starts from its note, and compactions and redactions inside it apply to
  what comes after.

After every step, beside the first machine's invariants, each thread's status, open runs,
last run and pending interrupts must be the model's, and so must each thread's `questions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from threadlog import (ForkRefused, InvalidEvent, ReportRefused, cancel_interrupt, fork_with_transcript, questions,
                       report, resolve_interrupt, thread_state, transcript)
from threadlog.subagents import escape
from tests.backends import file_dump
from tests.test_stateful import PICK, RESULT, TEXT, THREADS, Block, Ev, StoreMachine, Stream, text_of, window

DEFAULT_PLACEHOLDER = "Fork started — processing in background"
DIRECTIVE = st.sampled_from(["check prices", "check times", "a <b> & c", "line\nbreak", "d" * 2100])
SELDOM = st.sampled_from([False, False, False, True])  # a refused attempt, one time in four
BOILERPLATE = "<fork-boilerplate>\nwork alone\n</fork-boilerplate>"


@dataclass
class AgentEv(Ev):
    """A run's start or end (`name` the run), an interrupt raised or settled (`name` the
    interrupt, `call` the tool call it waits on, `question`), a fork's `demoted` interrupts."""

    name: str = ""
    call: str | None = None
    question: str = ""
    demoted: tuple[str, ...] = ()


@dataclass
class Launch:
    """A sub-agent: the calls its placeholder answered, the placeholder, its directive."""

    calls: tuple[str, ...]
    placeholder: str
    directive: str
    forked: Ev
    primed: Ev
    reports: dict[int, tuple[int, str, str]] = field(default_factory=dict)  # cause position -> (position, status, text)


class AgentMachine(StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kids: dict[str, Launch] = {}
        self.names = 0

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    # -- the model ----------------------------------------------------------------------------

    @staticmethod
    def open_runs(history: list[Ev]) -> list[str]:
        """The runs started and not finished since the last fork (a fork starts with none)."""
        runs: list[str] = []
        for ev in history:
            if ev.kind == "forked":
                runs = []
            elif isinstance(ev, AgentEv) and ev.kind == "run_started":
                runs.append(ev.name)
            elif isinstance(ev, AgentEv) and ev.kind == "run_finished":
                runs.remove(ev.name)
        return runs

    @staticmethod
    def open_interrupts(history: list[Ev]) -> list[AgentEv]:
        """The interrupts raised and not settled since the last fork (a fork demotes them)."""
        raised: list[AgentEv] = []
        for ev in history:
            if ev.kind == "forked":
                raised = []
            elif isinstance(ev, AgentEv) and ev.kind == "raised":
                raised.append(ev)
            elif isinstance(ev, AgentEv) and ev.kind == "settled":
                raised = [r for r in raised if r.name != ev.name]
        return raised

    def last_run(self, history: list[Ev]) -> AgentEv | None:
        last: AgentEv | None = None
        for ev in history:
            if ev.kind == "forked":
                last = None
            elif isinstance(ev, AgentEv) and ev.kind == "run_finished":
                last = ev
        return last

    def waited(self, thread: str) -> set[str]:
        return {r.call for r in self.open_interrupts(self.history(thread)) if r.call is not None}

    def status(self, thread: str) -> str:
        history = self.history(thread)
        return "running" if self.open_runs(history) else "interrupted" if self.open_interrupts(history) else "idle"

    def nested(self, thread: str) -> bool:
        """Whether `thread`'s history holds a sub-agent's own events: it may not fan out."""
        stream: Stream | None = self.streams[thread]
        child: Stream | None = None
        while stream is not None:
            if stream.id in self.kids and (child is None or child.base > stream.base):
                return True
            child, stream = stream, None if stream.parent is None else self.streams[stream.parent]
        return False

    def launched(self, thread: str) -> list[str]:
        """The sub-agents already launched for the calls `thread` waits on (the README: those
        forked since its last assistant message whose placeholders answer one of them, less
        those the run still open there launched itself)."""
        history = self.history(thread)
        head, waiting, runs = len(history), set(self.pending(history)), set(self.open_runs(history))
        turn = max((ev.offset for ev in history if ev.kind == "message" and ev.role == "assistant"), default=None)
        since = 0 if turn is None else turn
        own, started = head, set()
        for ev in reversed(history[since + 1 if turn is not None else 0:]):
            if isinstance(ev, AgentEv) and ev.kind == "run_started" and ev.name in runs:
                started.add(ev.name)
                own = ev.offset
        if runs - started:
            own = since
        return [k for k, made in self.kids.items() if self.streams[k].parent == thread and since < self.streams[k].base <= head
                and self.streams[k].base <= own and waiting & set(made.calls)]

    def unchanged_by(self, attempt: Any, *errors: type[BaseException]) -> BaseException:
        """Run `attempt`, which must raise one of `errors`; the file must be as it was."""
        before = file_dump(self.path)
        try:
            attempt()
        except errors as refused:
            assert file_dump(self.path) == before
            return refused
        raise AssertionError("not refused")

    def redactable(self) -> list[tuple[str, Ev]]:
        more = [(s.id, ev) for s in self.streams.values() for ev in s.own
                if ev.kind in ("run_started", "run_finished", "raised", "settled") and not ev.redacted]
        return super().redactable() + more

    # -- runs ---------------------------------------------------------------------------------

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, again=SELDOM)
    def start_run(self, pick: int, again: bool) -> None:
        t = self.order[pick % len(self.order)]
        runs = self.open_runs(self.history(t))
        if again and runs:  # an open run's id again: refused
            refused = self.unchanged_by(lambda: self.store.append(t, [{"type": "run.started", "data": {"run_id": runs[0]}}]),
                                        InvalidEvent)
            assert "already in progress" in str(refused), refused
            return
        name = self.fresh("run-")
        recorded = self.store.append(t, [{"type": "run.started", "data": {"run_id": name}}])[0]
        self.record(t, AgentEv("run_started", recorded.offset, recorded.position, name=name))

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, status=st.sampled_from(["ok", "error", "cancelled"]), stray=SELDOM)
    def finish_run(self, pick: int, status: str, stray: bool) -> None:
        running = self.threads_where(lambda t: bool(self.open_runs(self.history(t)))) or self.order
        t = running[pick % len(running)]
        runs = self.open_runs(self.history(t))
        if stray or not runs:  # a run not open here: refused, naming it
            data = {"run_id": "never-started", "status": status}
            refused = self.unchanged_by(lambda: self.store.append(t, [{"type": "run.finished", "data": data}]), InvalidEvent)
            assert "never-started" in str(refused), refused
            return
        data = {"run_id": runs[-1], "status": status, **({"error": "overloaded"} if status == "error" else {})}
        recorded = self.store.append(t, [{"type": "run.finished", "data": data}])[0]
        self.record(t, AgentEv("run_finished", recorded.offset, recorded.position, name=runs[-1], question=status))

    # -- interrupts ---------------------------------------------------------------------------

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, question=TEXT, on_call=st.booleans(), taken=SELDOM)
    def raise_interrupt(self, pick: int, question: str, on_call: bool, taken: bool) -> None:
        t = self.order[pick % len(self.order)]
        history = self.history(t)
        waited = self.waited(t)
        free = [c for c in self.pending(history) if c not in waited]
        name = self.fresh("q")
        data: dict[str, Any] = {"interrupt_id": name, "question": question}
        if taken and (waited or not on_call):  # a call another interrupt waits on, or none waiting: refused
            data["tool_use_id"] = sorted(waited)[0] if waited else "toolu_none"
            self.unchanged_by(lambda: self.store.append(t, [{"type": "interrupt.raised", "data": data}]), InvalidEvent)
            return
        if on_call and free:
            data["tool_use_id"] = free[0]
        recorded = self.store.append(t, [{"type": "interrupt.raised", "data": data}])[0]
        self.record(t, AgentEv("raised", recorded.offset, recorded.position, name=name, call=data.get("tool_use_id"),
                               question=question))

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, resolve=st.booleans(), answer=TEXT, stray=SELDOM)
    def settle_interrupt(self, pick: int, resolve: bool, answer: str, stray: bool) -> None:
        asking = self.threads_where(lambda t: bool(self.open_interrupts(self.history(t)))) or self.order
        t = asking[pick % len(asking)]
        raised = self.open_interrupts(self.history(t))
        if stray or not raised:  # no such interrupt pending here (one a fork demoted among them)
            name = self.fresh("q")
            attempt = (lambda: resolve_interrupt(self.store, t, name, answer)) if resolve else (
                lambda: cancel_interrupt(self.store, t, name, "asked by phone"))
            refused = self.unchanged_by(attempt, InvalidEvent)
            assert name in str(refused), refused
            return
        name = raised[0].name
        recorded = (resolve_interrupt(self.store, t, name, answer) if resolve else
                    cancel_interrupt(self.store, t, name, "asked by phone"))
        self.record(t, AgentEv("settled", recorded.offset, recorded.position, name=name))

    @precondition(lambda self: any(not self.idle(t) for t in self.order))
    @rule(pick=PICK, output=RESULT, failed=st.booleans())
    def answer_tools(self, pick: int, output: str, failed: bool) -> None:
        """The calls no interrupt waits on are answered; one an interrupt waits on is refused."""
        waiting = self.threads_where(lambda t: not self.idle(t))
        t = waiting[pick % len(waiting)]
        waited = self.waited(t)
        calls = [c for c in self.pending(self.history(t)) if c not in waited] or sorted(waited)
        content: list[Block] = [{"type": "tool_result", "tool_use_id": c, "content": output, **({"is_error": True} if failed else {})}
                                for c in calls]
        if set(calls) & waited:
            refused = self.unchanged_by(lambda: self.store.append_message(t, "user", content), InvalidEvent)
            assert "interrupt" in str(refused), refused
            return
        recorded = self.store.append_message(t, "user", content)
        self.record(t, Ev("message", recorded.offset, recorded.position, "user", content))
        assert set(self.store.pending_tool_uses(t)) == waited

    # -- forks, with runs, interrupts and notes -----------------------------------------------

    @precondition(lambda self: len(self.order) < THREADS and any(self.fork_points(t) for t in self.order))
    @rule(pick=PICK, at_pick=PICK, unanswered=st.sampled_from(["refuse", "drop"]), default_at=st.booleans(),
          busy=st.sampled_from(["refuse", "allow"]), note=st.sampled_from(["no", "no", "recorded", "written"]))
    def fork(self, pick: int, at_pick: int, unanswered: str, default_at: bool, busy: str, note: str) -> None:
        forkable = self.threads_where(self.fork_points)
        parent = forkable[pick % len(forkable)]
        points = self.fork_points(parent)
        at = points[-1] if default_at else points[at_pick % len(points)]
        history = self.history(parent)[:at]
        waiting, runs, raised = self.pending(history), self.open_runs(history), self.open_interrupts(history)
        path = self.dir / f"{self.fresh('note-')}.transcript.md"
        options: dict[str, Any] = {"unanswered": unanswered, **({"busy": "allow"} if busy == "allow" else {})}
        where = None if default_at else at

        def attempt() -> str:
            if note == "written":
                return fork_with_transcript(self.store, parent, path, where, **options)
            if note == "recorded":
                return self.store.fork(parent, where, context="note", transcript=str(path), **options)
            return self.store.fork(parent, where, **options)

        before = [e.to_json() for e in self.store.read(parent)]
        if runs and busy == "refuse":
            refused = self.unchanged_by(attempt, ForkRefused)
            assert isinstance(refused, ForkRefused) and refused.reason == "busy", refused
            assert runs[-1] in str(refused) and not path.exists()
            return
        if waiting and unanswered == "refuse" and note == "no":
            refused = self.unchanged_by(attempt, ForkRefused)
            assert isinstance(refused, ForkRefused) and refused.reason == "unanswered_tool_calls", refused
            assert sorted(refused.tool_use_ids) == sorted(waiting)
            return
        f = attempt()
        assert [e.to_json() for e in self.store.read(parent)] == before  # a fork never writes to its parent
        self.streams[f] = Stream(f, parent, at)
        self.order.append(f)
        event = next(iter(self.store.read(f, at)))
        assert (event.type, event.stream_id, event.offset) == ("thread.forked", f, at)
        dropped = waiting if note == "no" else []
        assert sorted(event.data.get("dropped_tool_use_ids") or []) == sorted(dropped)
        assert event.data.get("demoted_interrupt_ids", []) == [r.name for r in raised]
        assert thread_state(self.store, f).status == "idle" and self.store.pending_interrupts(f) == ()
        if note == "written":  # the parent's transcript as of the fork point, there before the fork
            assert path.read_text(encoding="utf-8") == transcript(self.store, parent, stop=at)
        self.record(f, AgentEv("forked", at, event.position, dropped=tuple(dropped), note=note != "no",
                               path=str(path) if note != "no" else None, demoted=tuple(r.name for r in raised)))

    # -- sub-agents ---------------------------------------------------------------------------

    @precondition(lambda self: len(self.order) + 2 <= THREADS and any(not self.idle(t) for t in self.order))
    @rule(pick=PICK, directives=st.lists(DIRECTIVE, min_size=1, max_size=2), boilerplate=st.booleans(),
          placeholder=st.sampled_from([None, "started"]), waiting_only=st.booleans())
    def fan_out(self, pick: int, directives: list[str], boilerplate: bool, placeholder: str | None, waiting_only: bool) -> None:
        choices = self.threads_where(lambda t: not self.idle(t)) if waiting_only else self.order
        t = choices[pick % len(choices)]
        history = self.history(t)
        waiting = self.pending(history)
        options: dict[str, Any] = {"boilerplate": BOILERPLATE} if boilerplate else {}
        if placeholder is not None:
            options["placeholder"] = placeholder

        def attempt() -> list[str]:
            return self.store.fan_out(t, directives, **options)

        launched = self.launched(t)
        if self.nested(t) or not waiting or launched:
            refused = self.unchanged_by(attempt, ForkRefused)
            assert isinstance(refused, ForkRefused)
            expected = "recursion" if self.nested(t) else "no_pending_tool_use" if not waiting else "already_launched"
            assert refused.reason == expected, (refused.reason, str(refused))
            if expected == "already_launched":
                assert refused.subagent_ids == launched, (refused.subagent_ids, launched)
            return
        kids = attempt()
        assert len(kids) == len(directives)
        said = DEFAULT_PLACEHOLDER if placeholder is None else placeholder
        head = len(history)
        demoted = [r.name for r in self.open_interrupts(history)]  # the parent's questions are not its sub-agents'
        for kid, directive in zip(kids, directives):
            self.streams[kid] = Stream(kid, t, head)
            self.order.append(kid)
            events = list(self.store.read(kid, head))
            assert [e.type for e in events] == ["thread.forked", "message.appended"]
            assert events[0].data["options"]["kind"] == "subagent" and events[0].data["options"]["directive"] == directive
            assert events[0].data.get("demoted_interrupt_ids", []) == demoted
            content: list[Block] = [{"type": "tool_result", "tool_use_id": c, "content": said} for c in waiting]
            content += [*(text_of(BOILERPLATE) if boilerplate else []), *text_of(directive)]
            assert events[1].data["content"] == content and events[1].meta["origin"] == "primed"
            forked = AgentEv("forked", head, events[0].position)
            self.record(kid, forked)
            primed = Ev("message", head + 1, events[1].position, "user", content)
            self.record(kid, primed)
            self.kids[kid] = Launch(tuple(waiting), said, directive, forked, primed)

    def reusable(self, thread: str) -> list[str]:
        """Ids of calls `thread` launched sub-agents from that wait no more: a new turn may use
        them again (an id names one pending call), and is no call those sub-agents answer."""
        if not self.idle(thread):
            return []
        return sorted({c for k, made in self.kids.items() if self.streams[k].parent == thread for c in made.calls})

    @precondition(lambda self: any(self.reusable(t) for t in self.order))
    @rule(pick=PICK)
    def call_tools_again(self, pick: int) -> None:
        """A new turn calling tools under the ids of calls answered before."""
        threads = self.threads_where(self.reusable)
        t = threads[pick % len(threads)]
        content: list[Block] = [{"type": "tool_use", "id": c, "name": "Agent", "input": {}} for c in self.reusable(t)]
        recorded = self.store.append_message(t, "assistant", content)
        self.record(t, Ev("message", recorded.offset, recorded.position, "assistant", content))

    def answer(self, kid: str) -> tuple[Ev | None, str]:
        """The sub-agent's answer a report without text delivers, or why there is none."""
        history = self.history(kid)
        if self.open_runs(history) or self.open_interrupts(history) or self.pending(history):
            return None, "has not finished"
        entries = [ev for ev in window(history)[1] if ev.kind == "message"]
        view = self.view(kid)
        last = entries[-1] if entries and view and view[-1][2] == "message" else None
        if last is None or last.offset < self.streams[kid].base + 2 or last.role != "assistant":
            return None, "no answer of its own yet"
        if last.redacted:
            return last, "was redacted"
        text = "\n\n".join(b["text"] for b in last.content if b["type"] == "text" and b["text"].strip())
        return (last, text) if text else (None, "holds no text to report")

    @precondition(lambda self: any(k in self.kids and self.idle(k) for k in self.order))
    @rule(pick=PICK, text=TEXT, calls=SELDOM)
    def subagent_answers(self, pick: int, text: str, calls: bool) -> None:
        """A sub-agent's turn: its answer, or (one time in four) a call of a tool first."""
        kids = [k for k in self.order if k in self.kids and self.idle(k)]
        kid = kids[pick % len(kids)]
        content = [*text_of(text), *([{"type": "tool_use", "id": self.fresh("toolu_k"), "name": "search", "input": {}}] if calls else [])]
        recorded = self.store.append_message(kid, "assistant", content)
        self.record(kid, Ev("message", recorded.offset, recorded.position, "assistant", content))

    @precondition(lambda self: bool(self.kids))
    @rule(pick=PICK, explicit=st.one_of(st.none(), st.none(), RESULT), status=st.sampled_from(["completed", "completed", "failed"]),
          any_thread=SELDOM)
    def report_back(self, pick: int, explicit: str | None, status: str, any_thread: bool) -> None:
        choices = self.order if any_thread else list(self.kids)
        kid = choices[pick % len(choices)]
        if explicit is None and status != "completed":
            explicit = "gave up"
        attempt = (lambda: report(self.store, kid)) if explicit is None else (lambda: report(self.store, kid, explicit, status=status))
        if kid not in self.kids:
            refused = self.unchanged_by(attempt, ReportRefused)
            assert isinstance(refused, ReportRefused) and refused.reason == "not_a_subagent", refused
            return
        made, stream = self.kids[kid], self.streams[kid]
        if explicit is None:
            cause, text = self.answer(kid)
            if cause is None or cause.redacted and cause.position not in made.reports:
                refused = self.unchanged_by(attempt, ReportRefused)
                assert isinstance(refused, ReportRefused) and refused.reason == "no_answer", refused
                return
        else:
            own = self.history(kid)
            cause, text = own[-1], explicit
            while cause.kind == "redaction" and cause.offset > stream.base:
                cause = own[cause.offset - 1]
        assert stream.parent is not None
        parent = stream.parent
        if cause.position in made.reports:  # a retry: the message written before, or refused when it said other things
            position, said_status, said = made.reports[cause.position]
            delivered_ev = next(ev for ev in self.streams[parent].own if ev.position == position)
            if explicit is not None and not delivered_ev.redacted and (said_status, said) != (status, text):
                refused = self.unchanged_by(attempt, InvalidEvent)
                assert "already reported" in str(refused), refused
                return
            before = file_dump(self.path)
            assert attempt().position == position
            assert file_dump(self.path) == before
            return
        history = self.history(parent)
        waiting = self.pending(history)
        turned = any(ev.kind == "message" and ev.role == "assistant" for ev in history[stream.base:])
        launch = () if turned else made.calls
        if any(c not in launch for c in waiting):
            refused = self.unchanged_by(attempt, ReportRefused)
            assert isinstance(refused, ReportRefused) and refused.reason == "parent_waiting", refused
            return
        directive = "" if made.forked.redacted else made.directive
        summary = directive if len(directive) <= 2000 else directive[:2000] + "…"
        placeholder = DEFAULT_PLACEHOLDER if made.primed.redacted else made.placeholder
        notification = (f"<task-notification>\n<task-id>{escape(kid)}</task-id>\n<status>{status}</status>\n"
                        f"<summary>{escape(summary)}</summary>\n<result>{escape(text)}</result>\n</task-notification>")
        content: list[Block] = [{"type": "tool_result", "tool_use_id": c, "content": placeholder} for c in waiting]
        content.append(text_of(notification)[0])
        cancelled = [r for c in waiting for r in self.open_interrupts(history) if r.call == c]
        delivered = attempt()
        assert (delivered.stream_id, delivered.offset) == (parent, len(history) + len(cancelled)), delivered
        assert delivered.data["content"] == content
        assert delivered.meta["causation_id"] == self.store.event_at(kid, cause.offset).event_id
        for i, r in enumerate(cancelled):
            settled = self.store.event_at(parent, len(history) + i)
            assert settled.type == "interrupt.cancelled" and settled.data["interrupt_id"] == r.name
            self.record(parent, AgentEv("settled", settled.offset, settled.position, name=r.name))
        self.record(parent, Ev("message", delivered.offset, delivered.position, "user", content))
        made.reports[cause.position] = (delivered.position, status, text)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def each_thread_waits_as_the_model(self) -> None:
        for t in self.order:
            history = self.history(t)
            state = thread_state(self.store, t)
            assert state.status == self.status(t), (t, state.status)
            assert state.open_runs == self.open_runs(history)
            raised = self.open_interrupts(history)
            assert [r["interrupt_id"] for r in state.pending_interrupts] == [r.name for r in raised]
            assert self.store.pending_interrupts(t) == tuple(r.name for r in raised)
            assert set(self.store.pending_tool_uses(t)) == set(self.pending(history))
            last = self.last_run(history)
            got = state.last_run
            assert (got and (got["run_id"], got["status"], got["offset"])) == (last and (last.name, last.question, last.offset))

    @invariant()
    def questions_show_what_waits_below(self) -> None:
        for t in self.order:
            askers = [t] + [k for k in self.order if k in self.kids and self.streams[k].parent == t]
            expected = [(a, r.name, None if r.redacted else r.question, r.call, r.offset)
                        for a in askers for r in self.open_interrupts(self.history(a))]
            assert [tuple(q) for q in questions(self.store, t)] == expected, t


AgentMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=40, deadline=None, derandomize=True,
                                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_agents_keep_the_store_s_promises_over_any_sequence = AgentMachine.TestCase
