"""What a full `verify` finds, a check of the thread alone (`only=`) and `verify --since` a
checkpoint taken before the tampered events find too, naming the same position."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from eventstore.verify import verify
from threadlog import IntegrityError, Store


def verdicts(db: Path, thread: str, since: str) -> list[tuple[int | None, str]]:
    """(position, message) of the full verify, the check of `thread` alone and `since`: each must fail."""
    out = []
    with Store(db, read_only=True) as store:
        for check in (store.verify, lambda: verify(store.backend, only=[thread]), lambda: store.verify(since=since)):
            with pytest.raises(IntegrityError) as caught:
                check()
            out.append((caught.value.position, caught.value.why))
    return out


def test_a_payload_put_back_after_its_redaction_fails_every_verify(tmp_path: Path) -> None:
    """The `event.redacted` says the payload was erased; a row holding it again (its original
    data, which still matches the chain, and no `redacted_by`) contradicts it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", thread_id="t")
        secret = store.append_message(t, "user", "my password is hunter2")
        store.append_message(t, "assistant", "noted")
        before = store.checkpoint()
        record = store.redact(secret.position, reason="leak", actor="dpo")
        store.verify()
    conn = sqlite3.connect(db)
    original = '{"content":[{"text":"my password is hunter2","type":"text"}],"role":"user"}'
    conn.execute("UPDATE events SET data = ?, data_digest = NULL, redacted_by = NULL WHERE position = ?",
                 (original, secret.position))
    conn.commit()
    conn.close()
    with Store(db, read_only=True) as store:
        assert store.event_at("t", 1).data["content"][0]["text"] == "my password is hunter2"
    found = verdicts(db, "t", before)
    assert {position for position, _ in found} == {record.position}, found
    assert all(f"names position {secret.position}, which it did not erase" in why for _, why in found), found
