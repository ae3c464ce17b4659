"""Generate `schema/`: a JSON Schema per event type, the meta schema, and the SQL DDL.

Run `python -m eventstore.schema_files` after changing a model or a migration; a test
fails while the checked-in files differ from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .events import CATALOGUE, Meta
from .sqlite import SQLiteBackend

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"


def render() -> dict[str, str]:
    """File name -> content, for every generated file."""
    files = {}
    for type_, model in CATALOGUE.items():
        schema = model.model_json_schema()
        schema["$id"] = f"threadlog:event/{type_}/v{model.schema_version}"
        schema["title"] = type_
        schema["x-schema-version"] = model.schema_version
        files[f"events/{type_}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    files["meta.json"] = json.dumps(Meta.model_json_schema(), indent=2, sort_keys=True) + "\n"
    backend = SQLiteBackend(":memory:")
    try:
        files["schema.sql"] = f"-- threadlog schema version {backend.schema_version()}\n" + backend.ddl()
    finally:
        backend.close()
    return files


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    written = []
    for name, content in render().items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_DIR):
        print(path)
