"""Pages of the documentation site that are generated, not written: the REST API reference, rendered
from the OpenAPI schema the API itself serves (kept in docs/openapi.json; a test compares it with the
live schema, so the page cannot fall behind the code).

Used as an MkDocs hook (mkdocs.yml `hooks:`): it imports nothing of Django, only reads the JSON.
"""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "openapi.json"
PAGE = "api-reference.md"
METHODS = ("get", "post", "put", "patch", "delete")


def _cell(text) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _schema_name(content: dict) -> str:
    for media in (content or {}).values():
        ref = (media.get("schema") or {}).get("$ref", "")
        if ref:
            return f"`{ref.rsplit('/', 1)[-1]}`"
        if media.get("schema"):
            return f"`{media['schema'].get('type', 'object')}`"
    return ""


def render(schema: dict) -> str:
    """The reference page: every path and method with its summary, parameters, body and answers."""
    info = schema.get("info", {})
    out = [f"# REST API reference", "",
           f"{_cell(info.get('description'))} (version {info.get('version', '?')}). Generated from the OpenAPI "
           f"schema the server publishes at `/api/v1/schema/`; the interactive version is at `/api/v1/docs/`.", ""]
    by_tag: dict[str, list[tuple[str, str, dict]]] = {}
    for path, item in sorted(schema.get("paths", {}).items()):
        for method in METHODS:
            if method in item:
                op = item[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    for tag in sorted(by_tag):
        out += [f"## {tag}", ""]
        for path, method, op in by_tag[tag]:
            out += [f"### `{method.upper()} {path}`", "", _cell(op.get("summary")), ""]
            if op.get("description"):
                out += [_cell(op["description"]), ""]
            params = op.get("parameters") or []
            if params:
                out += ["| parameter | in | required | description |", "|---|---|---|---|"]
                out += [f"| `{p['name']}` | {p.get('in', '')} | {'yes' if p.get('required') else 'no'} | "
                        f"{_cell(p.get('description'))} |" for p in params]
                out.append("")
            body = _schema_name((op.get("requestBody") or {}).get("content"))
            if body:
                out += [f"Body: {body}", ""]
            answers = [f"{code} {_schema_name(r.get('content'))}".strip() for code, r in sorted(op.get("responses", {}).items())]
            if answers:
                out += ["Answers: " + ", ".join(answers), ""]
    return "\n".join(out).rstrip() + "\n"


def on_files(files, config):
    """MkDocs hook: add the generated reference page beside the written ones."""
    from mkdocs.structure.files import File

    schema = json.loads((Path(config["docs_dir"]) / SCHEMA).read_text())
    files.append(File.generated(config, PAGE, content=render(schema)))
    return files
