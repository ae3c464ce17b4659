-- threadlog schema version 3
CREATE TABLE events (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_id TEXT NOT NULL REFERENCES streams(id),
    "offset" INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    type TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    data TEXT NOT NULL,
    meta TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    data_digest TEXT NOT NULL,
    hash TEXT NOT NULL,
    pending TEXT,
    redacted_by INTEGER
);

CREATE TABLE "snapshots" (
   "projection" TEXT,
   "version" INTEGER,
   "stream_id" TEXT,
   "offset" INTEGER,
   "state" TEXT NOT NULL,
   PRIMARY KEY ("projection", "version", "stream_id", "offset")
);

CREATE TABLE "streams" (
   "id" TEXT PRIMARY KEY,
   "parent_id" TEXT,
   "parent_offset" INTEGER,
   "root_id" TEXT NOT NULL,
   "depth" INTEGER NOT NULL,
   "head" INTEGER NOT NULL,
   "created_position" INTEGER,
   "kind" TEXT NOT NULL,
   "head_hash" TEXT NOT NULL,
   "facts" TEXT,
   "first_message_offset" INTEGER
, "last_position" INTEGER);

CREATE UNIQUE INDEX "events_event_id"
    ON "events" ("event_id");

CREATE UNIQUE INDEX "events_stream_offset"
    ON "events" ("stream_id", "offset");

CREATE INDEX events_titles ON events(stream_id, "offset") WHERE type IN ('thread.created', 'title.set');

CREATE INDEX "streams_activity"
    ON "streams" ("last_position");

CREATE INDEX "streams_parent"
    ON "streams" ("parent_id");
