-- threadlog schema version 8
CREATE TABLE "events" (
    position INTEGER PRIMARY KEY,
    stream_id TEXT NOT NULL REFERENCES streams(id),
    "offset" INTEGER NOT NULL,
    event_id BLOB NOT NULL,
    type BLOB NOT NULL,
    schema_version INTEGER NOT NULL,
    data TEXT NOT NULL,
    meta TEXT NOT NULL,
    recorded_at BLOB NOT NULL,
    data_digest BLOB,
    hash BLOB NOT NULL,
    pending TEXT,
    redacted_by INTEGER
);

CREATE TABLE "search_docs" (
   "docid" INTEGER PRIMARY KEY,
   "position" INTEGER NOT NULL,
   "stream_id" TEXT NOT NULL,
   "offset" INTEGER NOT NULL,
   "kind" TEXT NOT NULL,
   "role" TEXT,
   "tool" TEXT,
   "text" TEXT NOT NULL
);

CREATE VIRTUAL TABLE search_fts USING fts5(text, content='search_docs', content_rowid='docid', tokenize='unicode61 remove_diacritics 2');

CREATE TABLE 'search_fts_config'(k PRIMARY KEY, v) WITHOUT ROWID;

CREATE TABLE 'search_fts_data'(id INTEGER PRIMARY KEY, block BLOB);

CREATE TABLE 'search_fts_docsize'(id INTEGER PRIMARY KEY, sz BLOB);

CREATE TABLE 'search_fts_idx'(segid, term, pgno, PRIMARY KEY(segid, term)) WITHOUT ROWID;

CREATE TABLE "search_progress" (
   "name" TEXT PRIMARY KEY,
   "position" INTEGER NOT NULL
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
, "last_position" INTEGER, recency INTEGER);

CREATE UNIQUE INDEX events_event_id ON events (event_id);

CREATE INDEX events_other ON events (stream_id, "offset", type) WHERE type != 2;

CREATE UNIQUE INDEX events_stream_offset ON events (stream_id, "offset");

CREATE INDEX search_titles ON search_docs (stream_id, "offset") WHERE kind = 'title';

CREATE INDEX "streams_parent"
    ON "streams" ("parent_id");

CREATE INDEX streams_recency ON streams (parent_id IS NULL, recency);
